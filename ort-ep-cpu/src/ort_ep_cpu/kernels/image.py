"""Image ops: Resize and Upsample (separable, one vectorised 1-D pass per resized axis)."""

from __future__ import annotations

import math

import numpy as np

from ..registry import kernel
from ._util import normalize_axis

_COORD_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
    "tf_crop_and_resize",
)
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")


def _text(value, default: str) -> str:
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else str(value)


def _choice(node, name: str, default: str, valid: tuple[str, ...]) -> str:
    value = _text(node.attr(name), default)
    if value not in valid:
        raise ValueError(f"{node.op_type} {node.name!r}: attribute {name}={value!r}; valid values: {list(valid)}")
    return value


def _source_coords(mode: str, out_len: int, in_len: int, scale: float, roi: tuple[float, float] | None):
    """Where each output index along one axis samples the input (float64), per the ONNX modes."""
    y = np.arange(out_len, dtype=np.float64)
    out_float = scale * in_len  # the un-rounded output length the spec's formulas use
    if mode == "align_corners":
        return np.zeros(out_len) if out_float == 1 else y * (in_len - 1) / (out_float - 1)
    if mode == "asymmetric":
        return y / scale
    if mode == "tf_half_pixel_for_nn":
        return (y + 0.5) / scale
    if mode == "pytorch_half_pixel":
        return np.full(out_len, -0.5) if out_float == 1 else (y + 0.5) / scale - 0.5
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = (in_len / 2) * (1 - out_len / out_float)
        return offset + (y + 0.5) / scale - 0.5
    # tf_crop_and_resize
    start, end = roi if roi is not None else (0.0, 1.0)
    if out_float == 1:
        x = np.full(out_len, (end - start) * (in_len - 1) / 2)
    else:
        x = y * (end - start) * (in_len - 1) / (out_float - 1)
    return x + start * (in_len - 1)


def _nearest_index(x: np.ndarray, nearest_mode: str, scale: float) -> np.ndarray:
    if nearest_mode == "round_prefer_floor":
        idx = np.ceil(x - 0.5)
    elif nearest_mode == "round_prefer_ceil":
        idx = np.floor(x + 0.5)
    elif nearest_mode == "floor":
        idx = np.floor(x)
    elif nearest_mode == "ceil":
        idx = np.ceil(x)
    else:  # "simple": opset < 11 (Upsample, Resize-10) behaviour of onnxruntime
        idx = np.ceil(x) if scale < 1 else np.floor(x)
    return idx.astype(np.int64)


def _cubic(d: np.ndarray, a: float) -> np.ndarray:
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _taps(x: np.ndarray, mode: str, scale: float, antialias: bool, cubic_a: float, exclude_outside: bool, in_len: int):
    """(indices, weights), each (out_len, n_taps): the filter taps of every output position.

    With antialias the filter is widened by 1/scale when downsampling, so each output averages
    all the inputs it covers; weights are normalised to sum to 1."""
    radius = 1 if mode == "linear" else 2
    s = min(scale, 1.0) if antialias else 1.0
    start = math.floor(-radius / s) + 1
    n = 2 - 2 * start
    base = np.floor(x)
    positions = base[:, None].astype(np.int64) + np.arange(start, start + n)[None, :]
    dist = (positions - x[:, None]) * s
    if mode == "linear":
        w = np.clip(1 - np.abs(dist), 0, 1)
    else:
        w = _cubic(dist, cubic_a)
    if antialias:
        w = w / w.sum(axis=1, keepdims=True)
    if exclude_outside:
        w = np.where((positions < 0) | (positions >= in_len), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    return np.clip(positions, 0, in_len - 1), w


class _ResizeSpec:
    def __init__(self, node, opset_resize: int):
        self.node = node
        self.mode = _choice(node, "mode", "nearest", ("nearest", "linear", "cubic"))
        if opset_resize >= 11:
            self.coord = _choice(node, "coordinate_transformation_mode", "half_pixel", _COORD_MODES)
            self.nearest_mode = _choice(node, "nearest_mode", "round_prefer_floor", _NEAREST_MODES[:4])
        else:
            self.coord, self.nearest_mode = "asymmetric", "simple"
        self.cubic_a = float(node.attr("cubic_coeff_a", -0.75))
        self.exclude_outside = bool(node.attr("exclude_outside", 0))
        self.extrapolation = float(node.attr("extrapolation_value", 0.0))
        self.antialias = bool(node.attr("antialias", 0))
        self.policy = _choice(node, "keep_aspect_ratio_policy", "stretch", ("stretch", "not_larger", "not_smaller"))
        axes = node.attr("axes")
        self.axes = None if axes is None else [int(a) for a in axes]

    def plan(self, shape: tuple[int, ...], roi, scales, sizes):
        """Per resized axis: (axis, out_len, scale, roi pair)."""
        rank = len(shape)
        axes = list(range(rank)) if self.axes is None else [normalize_axis(a, rank) for a in self.axes]
        if sizes is not None and np.size(sizes) > 0:
            sizes = [int(v) for v in np.asarray(sizes).reshape(-1)]
            if len(sizes) != len(axes):
                raise ValueError(f"Resize {self.node.name!r}: sizes has {len(sizes)} values for {len(axes)} axes")
            axis_scales = [sizes[i] / shape[a] for i, a in enumerate(axes)]
            if self.policy != "stretch":
                pick = min if self.policy == "not_larger" else max
                common = pick(axis_scales)
                axis_scales = [common] * len(axes)
                sizes = [int(common * shape[a] + 0.5) for a in axes]  # round half up, as the spec says
            out = sizes
        elif scales is not None and np.size(scales) > 0:
            axis_scales = [float(v) for v in np.asarray(scales, dtype=np.float64).reshape(-1)]
            if len(axis_scales) != len(axes):
                raise ValueError(f"Resize {self.node.name!r}: scales has {len(axis_scales)} values for {len(axes)} axes")
            out = [int(math.floor(s * shape[a])) for s, a in zip(axis_scales, axes)]
        else:
            raise ValueError(f"Resize {self.node.name!r}: one of the inputs scales or sizes must be given")
        rois = None
        if roi is not None and np.size(roi) > 0 and self.coord == "tf_crop_and_resize":
            r = np.asarray(roi, dtype=np.float64).reshape(-1)
            k = len(axes)
            if r.size == 2 * rank and k != rank:
                rois = [(r[a], r[a + rank]) for a in axes]
            else:
                rois = [(r[i], r[i + k]) for i in range(k)]
        steps = []
        for i, a in enumerate(axes):
            pair = None if rois is None else rois[i]
            identity = out[i] == shape[a] and math.isclose(axis_scales[i], 1.0) and (
                pair is None or (math.isclose(pair[0], 0.0) and math.isclose(pair[1], 1.0))
            )
            if not identity:
                steps.append((a, out[i], axis_scales[i], pair))
        return steps

    def run(self, x: np.ndarray, roi=None, scales=None, sizes=None) -> np.ndarray:
        steps = self.plan(x.shape, roi, scales, sizes)
        if not steps:
            return x
        if self.mode == "nearest":
            y = x
            for axis, out_len, scale, pair in steps:
                src = _source_coords(self.coord, out_len, y.shape[axis], scale, pair)
                idx = np.clip(_nearest_index(src, self.nearest_mode, scale), 0, y.shape[axis] - 1)
                in_len = y.shape[axis]
                y = self._extrapolate(np.take(y, idx, axis=axis), axis, src, in_len)
            return y
        work = np.float64 if x.dtype == np.float64 else np.float32
        y = x.astype(work, copy=False)
        for axis, out_len, scale, pair in steps:
            in_len = y.shape[axis]
            src = _source_coords(self.coord, out_len, in_len, scale, pair)
            idx, w = _taps(src, self.mode, scale, self.antialias, self.cubic_a, self.exclude_outside, in_len)
            w = w.astype(work)
            wshape = (out_len,) + (1,) * (y.ndim - axis - 1)
            acc = None
            for t in range(idx.shape[1]):
                term = np.take(y, idx[:, t], axis=axis) * w[:, t].reshape(wshape)
                acc = term if acc is None else np.add(acc, term, out=acc)
            y = self._extrapolate(acc, axis, src, in_len)
        if x.dtype.kind in "iu":
            info = np.iinfo(x.dtype)
            return np.clip(np.rint(y), info.min, info.max).astype(x.dtype)
        return y.astype(x.dtype, copy=False)

    def _extrapolate(self, y: np.ndarray, axis: int, src: np.ndarray, in_len: int) -> np.ndarray:
        """tf_crop_and_resize: outputs sampling outside the input get extrapolation_value."""
        if self.coord != "tf_crop_and_resize":
            return y
        outside = (src < 0) | (src > in_len - 1)
        if not outside.any():
            return y
        mask = outside.reshape((-1,) + (1,) * (y.ndim - axis - 1))
        return np.where(mask, y.dtype.type(self.extrapolation), y)


@kernel("Resize", since=10)
def _resize_v10(node, request):
    spec = _ResizeSpec(node, 10)
    return lambda x, scales: spec.run(x, scales=scales)


@kernel("Resize", since=11)
def _resize_v11(node, request):
    spec = _ResizeSpec(node, 11)
    return lambda x, roi=None, scales=None, sizes=None: spec.run(x, roi, scales, sizes)


@kernel("Upsample", since=7)
def _upsample_v7(node, request):
    spec = _ResizeSpec(node, 10)
    scales = np.asarray(node.attr("scales"), dtype=np.float32)
    return lambda x: spec.run(x, scales=scales)


@kernel("Upsample", since=9)
def _upsample_v9(node, request):
    spec = _ResizeSpec(node, 10)
    return lambda x, scales: spec.run(x, scales=scales)
