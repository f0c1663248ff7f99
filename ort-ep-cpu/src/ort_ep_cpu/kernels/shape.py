"""Indexing and layout ops: GatherElements/ND, Scatter*, Pad, DepthToSpace, Trilu, TopK, Unique, ..."""

from __future__ import annotations

import functools
import math

import numpy as np
import onnx

from ..registry import kernel
from . import _jit
from ._util import normalize_axis, per_shape


def _text(node, name: str, default: str, valid: tuple[str, ...]) -> str:
    value = node.attr(name, default)
    value = value.decode() if isinstance(value, bytes) else str(value)
    if value not in valid:
        raise ValueError(f"{node.op_type} {node.name!r}: attribute {name}={value!r}; valid values: {list(valid)}")
    return value


def _fix_indices(indices: np.ndarray, size) -> np.ndarray:
    """Negative indices count from the end, as the ONNX gather/scatter ops allow."""
    indices = indices.astype(np.int64, copy=False)
    if indices.size == 0 or indices.min() >= 0:
        return indices  # the common case: one read instead of a compare, an add and a select
    return np.where(indices < 0, indices + size, indices)


# --- gather ---------------------------------------------------------------------------------


@kernel("GatherElements", since=11)
def _gather_elements(node, request):
    axis = int(node.attr("axis", 0))

    def gather_elements(data, indices):
        a = normalize_axis(axis, data.ndim)
        return np.take_along_axis(data, _fix_indices(indices, data.shape[a]), axis=a)

    return gather_elements


def _batch_index(indices: np.ndarray, data_shape: tuple[int, ...], batch_dims: int):
    """Index tuple into ``data`` for GatherND/ScatterND with ``batch_dims`` leading batch axes."""
    k = indices.shape[-1]
    dims = np.array(data_shape[batch_dims : batch_dims + k], dtype=np.int64)
    idx = _fix_indices(indices, dims)
    batch = indices.shape[:batch_dims]
    lead = tuple(
        np.arange(n).reshape((1,) * i + (n,) + (1,) * (indices.ndim - 2 - i)) for i, n in enumerate(batch)
    )
    return lead + tuple(idx[..., i] for i in range(k))


@kernel("GatherND", since=11)
def _gather_nd(node, request):
    batch_dims = int(node.attr("batch_dims", 0))
    return lambda data, indices: data[_batch_index(indices, data.shape, batch_dims)]


# --- scatter --------------------------------------------------------------------------------

_REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


@functools.lru_cache(maxsize=256)
def _open_grid(shape: tuple) -> tuple:
    """np.indices(shape, sparse=True), made once per shape (3-4 us a call; a Loop body's
    scatter asks for the same shape every step). Read-only: callers replace entries, never
    write into them."""
    grid = np.indices(shape, sparse=True)
    for g in grid:
        g.flags.writeable = False
    return tuple(grid)


def _elements_index(indices: np.ndarray, axis: int, size: int) -> tuple:
    index = list(_open_grid(indices.shape))
    index[axis] = _fix_indices(indices, size)
    return tuple(index)


#: ScatterElements of at least this many indices checks first whether they scatter whole rows
ROW_SCATTER_MIN = 4096

#: data types the compiled row scatter with a reduction takes (numba's arithmetic; float16
#: and the rest go to numpy's ufunc.at)
_ROW_REDUCTION_TYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64))
#: the reductions' codes in ``_jit.scatter_rows``
_ROW_REDUCTION_CODES = {"add": 0, "mul": 1, "max": 2, "min": 3}


def _row_indices(indices: np.ndarray, data: np.ndarray, axis: int) -> np.ndarray | None:
    """Where ``indices`` covers ``data`` whole on every axis but ``axis`` and is constant along
    those axes (each index moves a whole row: torchvision's MultiScaleRoIAlign scatters its
    pooled regions back into place so), the row indices, else None."""
    if indices.ndim != data.ndim or any(indices.shape[d] != data.shape[d] for d in range(data.ndim) if d != axis):
        return None
    rows = np.moveaxis(indices, axis, 0).reshape(indices.shape[axis], -1)
    first = rows[:, :1]
    return first[:, 0] if (rows == first).all() else None


def _scatter_elements_builder(node, request):
    axis = int(node.attr("axis", 0))
    reduction = _text(node, "reduction", "none", ("none", *_REDUCTIONS))

    def scatter_elements(data, indices, updates):
        a = normalize_axis(axis, data.ndim)
        out = data.copy()
        if reduction == "none" and indices.size >= ROW_SCATTER_MIN:
            rows = _row_indices(indices, data, a)
            if rows is not None:
                # one row assignment (the last of duplicate rows wins, as in the spec's loop)
                # instead of one index per element: 23 -> 2.3 ms on a Faster R-CNN's 150 x 256 x 7 x 7
                np.moveaxis(out, a, 0)[_fix_indices(rows, data.shape[a])] = np.moveaxis(updates, a, 0)
                return out
        elif (reduction != "none" and a == 0 and out.dtype in _ROW_REDUCTION_TYPES and indices.size
              and updates.shape == indices.shape and indices.shape[1:] == data.shape[1:]):
            # a graph network's message passing (an Expand of edge ids as the indices): each
            # update row in order, as the spec's loop applies it, where every index row is one
            # index (the loop checks, and declines before writing)
            scatter_rows = _jit.scatter_rows()
            if scatter_rows is not None and scatter_rows(
                    out.reshape(data.shape[0], -1), np.ascontiguousarray(indices).reshape(indices.shape[0], -1),
                    np.ascontiguousarray(updates, dtype=out.dtype).reshape(indices.shape[0], -1),
                    _ROW_REDUCTION_CODES[reduction]):
                return out
        index = _elements_index(indices, a, data.shape[a])
        if reduction == "none":
            out[index] = updates
        else:
            # ufunc.at applies every duplicate index in order, as the spec's loop does
            _REDUCTIONS[reduction].at(out, index, updates)
        return out

    return scatter_elements


kernel("Scatter", since=9)(_scatter_elements_builder)
kernel("ScatterElements", since=11)(_scatter_elements_builder)


@kernel("ScatterND", since=11)
def _scatter_nd(node, request):
    reduction = _text(node, "reduction", "none", ("none", *_REDUCTIONS))

    def scatter_nd(data, indices, updates):
        out = data.copy()
        index = _batch_index(indices, data.shape, 0)
        if reduction == "none":
            out[index] = updates
        else:
            _REDUCTIONS[reduction].at(out, index, updates)
        return out

    return scatter_nd


# --- Pad ------------------------------------------------------------------------------------

_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def _pad(x: np.ndarray, pads, mode: str, value, axes=None) -> np.ndarray:
    rank = x.ndim
    pads = [int(p) for p in np.asarray(pads).reshape(-1)]
    axes = list(range(rank)) if axes is None else [normalize_axis(int(a), rank) for a in np.asarray(axes).reshape(-1)]
    k = len(axes)
    if len(pads) != 2 * k:
        raise ValueError(f"Pad: pads has {len(pads)} values, expected 2 * {k} (one begin and one end per axis)")
    width = [[0, 0] for _ in range(rank)]
    for i, a in enumerate(axes):
        width[a] = [pads[i], pads[i + k]]
    # negative pads crop; crop first so that reflect/edge/wrap see the cropped tensor
    crop = tuple(slice(max(0, -b), x.shape[d] - max(0, -e)) for d, (b, e) in enumerate(width))
    x = x[crop]
    width = [(max(0, b), max(0, e)) for b, e in width]
    if not any(b or e for b, e in width):
        return x.copy()
    if mode == "constant":
        fill = 0 if value is None or np.size(value) == 0 else np.asarray(value).reshape(-1)[0]
        # np.pad costs tens of microseconds of Python per call; a filled buffer and one copy
        # does the same (silero-vad pads a small tensor every run)
        out = np.empty(tuple(n + b + e for n, (b, e) in zip(x.shape, width)), dtype=x.dtype)
        out.fill(fill)
        out[tuple(slice(b, b + n) for n, (b, _) in zip(x.shape, width))] = x
        return out
    return _pad_by_slices(x, width, mode)


def _pad_by_slices(x: np.ndarray, width: list[tuple[int, int]], mode: str) -> np.ndarray:
    """reflect/edge/wrap as one concatenate of slices per padded axis, where the pads fit in
    one reflection/period (np.pad's general loop otherwise, for the same result)."""
    for axis, (b, e) in enumerate(width):
        if not (b or e):
            continue
        n = x.shape[axis]
        fits = n >= 1 and (max(b, e) <= n - 1 if mode == "reflect" else max(b, e) <= n)
        if not fits:
            only = [(0, 0)] * x.ndim
            only[axis] = (b, e)
            x = np.pad(x, only, mode=_PAD_MODES[mode])
            continue
        index = [slice(None)] * x.ndim

        def part(sl, x=x, index=index, axis=axis):
            index[axis] = sl
            return x[tuple(index)]

        if mode == "reflect":
            stop = n - 2 - e  # -1 would mean "the end" to a slice: the start of the axis is None
            head, tail = part(slice(b, 0, -1)), part(slice(n - 2, stop if stop >= 0 else None, -1))
        elif mode == "edge":
            head = np.repeat(part(slice(0, 1)), b, axis=axis)
            tail = np.repeat(part(slice(n - 1, n)), e, axis=axis)
        else:  # wrap
            head, tail = part(slice(n - b, n)), part(slice(0, e))
        x = np.concatenate([head, x, tail], axis=axis)
    return x


@kernel("Pad", since=1)
def _pad_v1(node, request):
    mode = _text(node, "mode", "constant", tuple(_PAD_MODES))
    pads = node.attr("paddings")  # Pad-1 named the attribute "paddings"
    value = float(node.attr("value", 0.0))
    return lambda x: _pad(x, pads, mode, np.asarray(value, dtype=x.dtype))


@kernel("Pad", since=2)
def _pad_v2(node, request):
    mode = _text(node, "mode", "constant", tuple(_PAD_MODES))
    pads = node.attr("pads")
    value = float(node.attr("value", 0.0))
    return lambda x: _pad(x, pads, mode, np.asarray(value, dtype=x.dtype))


#: inputs of at most this many elements are padded by one gather with an index kept per input
#: shape (constant pads): slicing, concatenates and the fill cost 5-15 us of Python per call
PAD_GATHER_MAX = 1 << 15


def _pad_index(shape: tuple, pads, constant_value, axes, mode: str) -> np.ndarray | None:
    """Flat indices into ``[*x.ravel(), fill]`` giving the padded tensor, made by padding the
    input's own indices with the same code (the fill, for constant mode, is the extra last
    element); None for inputs past PAD_GATHER_MAX."""
    size = math.prod(shape)
    if size > PAD_GATHER_MAX:
        return None
    idx = np.arange(size, dtype=np.intp).reshape(shape)
    return _pad(idx, pads, mode, np.asarray(size, dtype=np.intp), axes)


@kernel("Pad", since=11)
def _pad_v11(node, request):
    mode = _text(node, "mode", "constant", tuple(_PAD_MODES))
    lookup = per_shape(node, request, range(1, 4), lambda shape, p, v, a: _pad_index(shape, p, v, a, mode))

    def pad(x, pads, constant_value=None, axes=None):
        idx = lookup(x.shape, pads, constant_value, axes)
        if idx is None:
            return _pad(x, pads, mode, constant_value, axes)
        flat = x.reshape(-1)
        if mode == "constant":
            fill = 0 if constant_value is None or constant_value.size == 0 else constant_value.reshape(-1)[0]
            flat = np.concatenate((flat, np.full(1, fill, x.dtype)))
        return flat[idx]

    return pad


# --- layout ---------------------------------------------------------------------------------


@kernel("DepthToSpace", since=1)
def _depth_to_space(node, request):
    b = int(node.attr("blocksize"))
    mode = _text(node, "mode", "DCR", ("DCR", "CRD"))

    def depth_to_space(x):
        n, c, h, w = x.shape
        if mode == "DCR":
            y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
        else:
            y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
        return y.reshape(n, c // (b * b), h * b, w * b)

    return depth_to_space


@kernel("SpaceToDepth", since=1)
def _space_to_depth(node, request):
    b = int(node.attr("blocksize"))
    mode = _text(node, "mode", "DCR", ("DCR", "CRD"))  # mode exists from opset 28 on

    def space_to_depth(x):
        n, c, h, w = x.shape
        y = x.reshape(n, c, h // b, b, w // b, b)
        y = y.transpose(0, 3, 5, 1, 2, 4) if mode == "DCR" else y.transpose(0, 1, 3, 5, 2, 4)
        return y.reshape(n, c * b * b, h // b, w // b)

    return space_to_depth


@kernel("Trilu", since=14)
def _trilu(node, request):
    upper = bool(node.attr("upper", 1))

    def trilu(x, k=None):
        kk = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
        return np.triu(x, kk) if upper else np.tril(x, kk)

    return trilu


@kernel("EyeLike", since=9)
def _eye_like(node, request):
    dtype_attr = node.attr("dtype")
    k = int(node.attr("k", 0))

    def eye_like(x):
        dtype = x.dtype if dtype_attr is None else onnx.helper.tensor_dtype_to_np_dtype(int(dtype_attr))
        return np.eye(x.shape[0], x.shape[1], k=k, dtype=dtype)

    return eye_like


@kernel("CenterCropPad", since=18)
def _center_crop_pad(node, request):
    attr_axes = node.attr("axes")

    def center_crop_pad(x, shape):
        axes = range(x.ndim) if attr_axes is None else [normalize_axis(int(a), x.ndim) for a in attr_axes]
        target = [int(v) for v in np.asarray(shape).reshape(-1)]
        crop = [slice(None)] * x.ndim
        width = [(0, 0)] * x.ndim
        for a, t in zip(axes, target):
            d = x.shape[a]
            if t < d:
                start = (d - t) // 2
                crop[a] = slice(start, start + t)
            elif t > d:
                before = (t - d) // 2
                width[a] = (before, t - d - before)
        return np.pad(x[tuple(crop)], width)

    return center_crop_pad


@kernel("ReverseSequence", since=10)
def _reverse_sequence(node, request):
    batch_axis = int(node.attr("batch_axis", 1))
    time_axis = int(node.attr("time_axis", 0))

    def reverse_sequence(x, sequence_lens):
        lens = sequence_lens.astype(np.int64)
        t = np.arange(x.shape[time_axis])[:, None]
        src = np.where(t < lens[None, :], lens[None, :] - 1 - t, t)  # (time, batch)
        if time_axis > batch_axis:
            src = src.T
        shape = [1] * x.ndim
        shape[time_axis], shape[batch_axis] = x.shape[time_axis], x.shape[batch_axis]
        return np.take_along_axis(x, src.reshape(shape), axis=time_axis)

    return reverse_sequence


# --- selection ------------------------------------------------------------------------------


@kernel("Compress", since=9)
def _compress(node, request):
    axis = node.attr("axis")

    def compress(x, condition):
        cond = condition.astype(bool).reshape(-1)
        if axis is None:
            return np.compress(cond, x.reshape(-1))
        return np.compress(cond, x, axis=normalize_axis(int(axis), x.ndim))

    return compress


@kernel("OneHot", since=9)
def _one_hot(node, request):
    axis = int(node.attr("axis", -1))

    def one_hot(indices, depth, values):
        d = int(np.asarray(depth).reshape(-1)[0])
        idx = indices.astype(np.int64) if indices.dtype.kind in "iu" else np.trunc(indices).astype(np.int64)
        if idx.size and idx.min() < 0:  # negative indices count from depth
            idx = np.where(idx < 0, idx + d, idx)
        if values.dtype.kind in "SU":  # string values from an initializer: ONNX strings are objects
            values = np.array([v.decode() if isinstance(v, bytes) else str(v) for v in values.reshape(-1)], dtype=object)
        hot = idx[..., None] == np.arange(d)
        y = values[hot.astype(np.intp)]  # indexing keeps the values' dtype (np.where on str gives <U)
        target = normalize_axis(axis, indices.ndim + 1)
        return y if target == indices.ndim else np.moveaxis(y, -1, target)  # moveaxis: ~2 us

    return one_hot


def _descending_key(x: np.ndarray) -> np.ndarray:
    """A key whose ascending order is x's descending order (no overflow for integers)."""
    if x.dtype.kind in "iu":
        return np.invert(x)
    if x.dtype.kind == "b":
        return ~x
    return -x.astype(np.float64) if x.dtype.itemsize < 4 or x.dtype.kind == "V" else -x


#: TopK of at most this many values a row by the compiled loop (``_jit.top_k_rows``: O(N k))
TOP_K_COMPILED_MAX = 16
_TOP_K_COMPILED_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64))


def _top_k(x: np.ndarray, k: int, axis: int, largest: bool, sort: bool):
    a = normalize_axis(axis, x.ndim)
    n = x.shape[a]
    if k < 0 or k > n:
        raise ValueError(f"TopK: k={k} is outside [0, {n}] for axis {a} of shape {x.shape}")
    v = np.moveaxis(x, a, -1)
    if 0 < k <= TOP_K_COMPILED_MAX and v.dtype in _TOP_K_COMPILED_DTYPES and v.size and (loop := _jit.top_k_rows()) is not None:
        rows = np.ascontiguousarray(v).reshape(-1, n)
        values = np.empty((rows.shape[0], k), v.dtype)
        order = np.empty((rows.shape[0], k), np.int64)
        loop(rows, k, largest, values, order)
        shape = v.shape[:-1] + (k,)
        return np.moveaxis(values.reshape(shape), -1, a), np.moveaxis(order.reshape(shape), -1, a)
    key = _descending_key(v) if largest else v
    # largest first counts NaN above +inf, as onnxruntime does (numpy sorts NaN last either way)
    nan_first = largest and v.dtype.kind == "f" and k > 0 and bool(np.isnan(v).any())
    if k == 0:
        order = np.zeros(v.shape[:-1] + (0,), np.int64)
    elif nan_first:
        order = np.argsort(key, axis=-1, kind="stable")
        nans_then_rest = np.argsort(~np.isnan(np.take_along_axis(v, order, axis=-1)), axis=-1, kind="stable")
        order = np.take_along_axis(order, nans_then_rest, axis=-1)[..., :k]
    elif 8 * k < n:
        # select first: everything strictly better than the k-th key, then the earliest of the
        # keys equal to it (the spec breaks ties by the lower index), then sort only those k
        kth = np.partition(key, k - 1, axis=-1)[..., k - 1 : k]
        chosen = key <= kth
        if not (chosen.sum(axis=-1) == k).all():  # ties at the k-th key: keep the earliest ones
            better = key < kth
            need = k - better.sum(axis=-1, keepdims=True)
            chosen = better | ((key == kth) & (np.cumsum(key == kth, axis=-1) <= need))
        # exactly k chosen per row; nonzero lists them row by row in index order
        cand = np.nonzero(chosen.reshape(-1, n))[1].reshape(chosen.shape[:-1] + (k,))
        inner = np.argsort(np.take_along_axis(key, cand, axis=-1), axis=-1, kind="stable")
        order = np.take_along_axis(cand, inner, axis=-1)
    else:
        order = np.argsort(key, axis=-1, kind="stable")[..., :k]
    del sort  # results are always sorted; "sorted=0" leaves the order unspecified
    values = np.take_along_axis(v, order, axis=-1)
    return np.moveaxis(values, -1, a), np.moveaxis(order.astype(np.int64), -1, a)


@kernel("TopK", since=1)
def _top_k_v1(node, request):
    k, axis = int(node.attr("k")), int(node.attr("axis", -1))
    return lambda x: _top_k(x, k, axis, True, True)


@kernel("TopK", since=10)
def _top_k_v10(node, request):
    axis = int(node.attr("axis", -1))
    largest = bool(node.attr("largest", 1))
    sort = bool(node.attr("sorted", 1))
    return lambda x, k: _top_k(x, int(np.asarray(k).reshape(-1)[0]), axis, largest, sort)


@kernel("Unique", since=11)
def _unique(node, request):
    axis = node.attr("axis")
    sort = bool(node.attr("sorted", 1))
    n_out = len(node.outputs)  # Y, then the optional indices, inverse_indices and counts

    def unique(x):
        a = None if axis is None else normalize_axis(int(axis), x.ndim)
        y, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True, axis=a)
        inverse = inverse.reshape(-1)
        if not sort:
            # order of first occurrence: permute the sorted uniques and remap the inverse
            order = np.argsort(first, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(order.size)
            y = y[order] if a is None else np.take(y, order, axis=a)
            first, counts, inverse = first[order], counts[order], rank[inverse]
        if n_out == 1:
            return y
        return (y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64))[:n_out]

    return unique


@kernel("TensorScatter", since=24)
def _tensor_scatter(node, request):
    axis = int(node.attr("axis", -2))
    mode = _text(node, "mode", "linear", ("linear", "circular"))

    def tensor_scatter(past, update, write_indices=None):
        a = normalize_axis(axis, past.ndim)
        out = past.copy()
        n, max_len, seq = past.shape[0], past.shape[a], update.shape[a]
        start = np.zeros(n, np.int64) if write_indices is None else write_indices.astype(np.int64).reshape(-1)
        pos = start[:, None] + np.arange(seq)[None, :]  # (batch, seq): cache slot of each update step
        if mode == "circular":
            pos = pos % max_len
        # move the sequence axis next to batch so one fancy index writes every step of every sample
        out_v = np.moveaxis(out, a, 1)
        upd_v = np.moveaxis(update, a, 1)
        out_v[np.arange(n)[:, None], pos] = upd_v
        return out

    return tensor_scatter
