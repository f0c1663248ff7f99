"""Image ops: Resize/Upsample (linear over 2 or 3 axes as onnxruntime computes it, to the bit;
otherwise separable, one vectorised 1-D pass per resized axis), GridSample, AffineGrid,
RoiAlign, MaxRoiPool, NonMaxSuppression."""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..registry import kernel
from . import _jit
from ._util import normalize_axis, zeros_vector
from .elementwise import JIT_FLOATS

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


#: types whose linear Resize follows onnxruntime's arithmetic exactly (``_exact_linear``)
_EXACT_LINEAR_TYPES = frozenset(np.dtype(t) for t in (np.float32, np.uint8, np.int8, np.int32))


def _float32_coords(mode: str, out_len: int, in_len: int, scale: float, roi: tuple[float, float] | None) -> np.ndarray:
    """``_source_coords`` as onnxruntime computes them: float32 arithmetic in its order (double
    where it uses double), and the output index itself on an axis of scale 1."""
    f = np.float32
    x = np.arange(out_len, dtype=f)
    s = f(scale)
    if s == 1:
        return x
    if mode == "half_pixel":
        return (x + f(0.5)) / s - f(0.5)
    if mode == "asymmetric":
        return x / s
    if mode == "pytorch_half_pixel":
        return (x + f(0.5)) / s - f(0.5) if out_len > 1 else np.zeros(out_len, f)
    if mode == "tf_half_pixel_for_nn":
        return (x + f(0.5)) / s
    if mode == "align_corners":
        return np.zeros(out_len, f) if out_len == 1 else x * f(in_len - 1) / f(out_len - 1)
    if mode == "half_pixel_symmetric":
        adjustment = f(out_len) / (s * f(in_len))
        offset = (f(in_len) / f(2)) * (f(1) - adjustment)
        return (np.float64(offset) + (x.astype(np.float64) + 0.5) / np.float64(s) - 0.5).astype(f)
    start, end = (f(0), f(1)) if roi is None else (f(roi[0]), f(roi[1]))
    if out_len > 1:
        return start * f(in_len - 1) + (x * (end - start) * f(in_len - 1)) / f(out_len - 1)
    return np.full(out_len, 0.5 * (float(start) + float(end)) * (in_len - 1), f)


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


def _repeat_factor(idx: np.ndarray, in_len: int) -> int:
    """f if idx is [0]*f + [1]*f + ... (each input repeated f times, in order), else 0."""
    if in_len == 0 or idx.size % in_len:
        return 0
    f = idx.size // in_len
    return f if np.array_equal(idx, np.arange(idx.size) // f) else 0


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
    return positions, w


def _phase_taps(positions: np.ndarray, w: np.ndarray, in_len: int):
    """For an integer upsampling (out = f * in) whose taps repeat with period f, the
    (offset, weight) pairs of each phase r: output j*f + r = sum w * x[j + offset] (indices
    past the ends read the edge, i.e. edge padding). None when the pattern is not periodic."""
    out_len = positions.shape[0]
    if in_len == 0 or out_len % in_len or out_len == in_len:
        return None
    f = out_len // in_len
    base = np.arange(in_len)[:, None]
    phases = []
    for r in range(f):
        pos, wr = positions[r::f], w[r::f]
        offsets = pos - base
        if not ((offsets == offsets[:1]).all() and (wr == wr[:1]).all()):
            return None
        phases.append((offsets[0].tolist(), wr[0]))
    return phases


def _resize_phases(y: np.ndarray, axis: int, phases, work) -> np.ndarray:
    """Integer upsampling along ``axis`` from per-phase taps: unit-stride slices of the
    edge-padded input instead of gathers (the common bilinear/bicubic 2x upsample)."""
    in_len = y.shape[axis]
    lo = max(0, -min(min(o) for o, _ in phases))
    hi = max(0, max(max(o) for o, _ in phases))
    width = [(0, 0)] * y.ndim
    width[axis] = (lo, hi)
    padded = np.pad(y, width, mode="edge") if lo or hi else y
    f = len(phases)
    out = np.empty(y.shape[:axis] + (in_len, f) + y.shape[axis + 1 :], dtype=work)
    before = (slice(None),) * axis
    for r, (offsets, weights) in enumerate(phases):
        dst = out[before + (slice(None), r)]
        first = True
        for o, wt in zip(offsets, weights):
            if wt == 0:
                continue
            src = padded[before + (slice(lo + o, lo + o + in_len),)]
            if first:
                np.multiply(src, work(wt), out=dst)
                first = False
            else:
                dst += src * work(wt)
        if first:
            dst[...] = 0
    return out.reshape(y.shape[:axis] + (in_len * f,) + y.shape[axis + 1 :])


class _ResizeSpec:
    def __init__(self, node, opset_resize: int):
        self.node = node
        mode = _text(node.attr("mode"), "nearest")
        self.mode = "linear" if mode == "bilinear" and opset_resize < 11 else mode  # Upsample-1 says "bilinear"
        if self.mode not in ("nearest", "linear", "cubic"):
            raise ValueError(f"{node.op_type} {node.name!r}: attribute mode={mode!r}; valid values: ['nearest', 'linear', 'cubic']")
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
        self._geometry: dict = {}

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
            # float32(scale) * dim in float32, as onnxruntime computes it: tf2onnx's 10 -> 23
            # resize has scale 2.3f, whose product is 23.0 in float32 and 22.99999 in float64
            out = [int(np.float32(s) * np.float32(shape[a])) for s, a in zip(axis_scales, axes)]
        else:
            raise ValueError(f"Resize {self.node.name!r}: one of the inputs scales or sizes must be given")
        rois = None
        if roi is not None and np.size(roi) > 0 and self.coord == "tf_crop_and_resize":
            r = np.asarray(roi, dtype=np.float64).reshape(-1)
            k = len(axes)
            if r.size not in (2 * k, 2 * rank):
                raise ValueError(f"Resize {self.node.name!r}: roi has {r.size} values; tf_crop_and_resize needs a start "
                                 f"and an end per axis: {2 * k} for the {k} axes resized"
                                 + (f" (or {2 * rank} for all {rank})" if k != rank else ""))
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
        if any(out_len == 0 for _, out_len, _, _ in steps) or x.size == 0:
            shape = list(x.shape)
            for axis, out_len, _, _ in steps:
                shape[axis] = out_len
            return np.zeros(shape, dtype=x.dtype)  # an empty axis: nothing to interpolate
        if self.mode == "nearest":
            gathers = []
            for axis, out_len, scale, pair in steps:
                in_len = x.shape[axis]
                idx, src, factor = self._axis_geometry(out_len, in_len, scale, pair)
                gathers.append((axis, idx, src, in_len, factor))
            if self.coord != "tf_crop_and_resize" and all(g[4] for g in gathers):
                # integer upsampling where output j reads input j // f on every resized axis:
                # the output seen as (..., d, f, ...) per resized axis gets x in phase 0 of
                # every axis (one copy), then phase 0 copied to the other phases one axis at a
                # time from the last (1 + axes copies, each with long inner loops; one
                # broadcast copy of the whole had an inner loop of f = 2 values: 2.3x slower)
                out_shape, phase_axes = [], []
                factors = {g[0]: g[4] for g in gathers}
                if x.ndim == 4 and set(factors) <= {2, 3} and x.dtype in JIT_FLOATS and _jit.enabled():
                    # rows and columns of NCHW: one compiled pass writes each output row once
                    fh, fw = factors.get(2, 1), factors.get(3, 1)
                    n, c, h, w = x.shape
                    src = np.lib.stride_tricks.as_strided(
                        x, (n, c, fh, fw, h, w), (x.strides[0], x.strides[1], 0, 0, x.strides[2], x.strides[3]))
                    y = np.empty((n, c, h * fh, w * fw), dtype=x.dtype)
                    _jit.interleave()(src, zeros_vector(c, x.dtype), y)
                    return y
                for a, d in enumerate(x.shape):
                    out_shape.append(d)
                    if a in factors:
                        phase_axes.append(len(out_shape))
                        out_shape.append(factors[a])
                y = np.empty(out_shape, dtype=x.dtype)
                first = [slice(None)] * len(out_shape)
                for p in phase_axes:
                    first[p] = 0
                y[tuple(first)] = x
                for p in reversed(phase_axes):
                    if out_shape[p] == 1:
                        continue
                    src = [slice(None)] * len(out_shape)
                    for q in phase_axes:
                        if q < p:
                            src[q] = 0  # earlier axes: only their phase 0 is filled so far
                    dst = list(src)
                    src[p], dst[p] = slice(0, 1), slice(1, None)
                    y[tuple(dst)] = y[tuple(src)]
                return y.reshape([d * factors.get(a, 1) for a, d in enumerate(x.shape)])
            y = x
            for axis, idx, src, in_len, _ in gathers:
                y = self._extrapolate(np.take(y, idx, axis=axis), axis, src, in_len)
            return y
        spatial = self._exact_linear_axes(x, steps)
        if spatial is not None:
            if sizes is not None and np.size(sizes) > 0:
                # onnxruntime's scales of given sizes: float32 quotients
                steps = [(axis, out_len, float(np.float32(out_len) / np.float32(x.shape[axis])), pair)
                         for axis, out_len, _, pair in steps]
            return self._exact_linear(x, spatial, steps)
        work = np.float64 if x.dtype == np.float64 else np.float32
        y = x.astype(work, copy=False)
        for axis, out_len, scale, pair in steps:
            in_len = y.shape[axis]
            phases, idx, w, src = self._axis_geometry(out_len, in_len, scale, pair)
            if phases is not None:
                y = _resize_phases(y, axis, phases, work)
                continue
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

    def _exact_linear_axes(self, x: np.ndarray, steps) -> tuple[int, ...] | None:
        """The axes onnxruntime interpolates together where its linear Resize is one formula
        over 2 or 3 axes (bilinear: 2-D x, or 4-D NCHW / NHWC with the batch and the channels
        kept; trilinear: 3-D x, or 5-D with the first two axes kept), for the types it computes
        so (float32, and the integers it truncates); None elsewhere (the separable passes)."""
        if (self.mode != "linear" or self.antialias or x.dtype not in _EXACT_LINEAR_TYPES
                or self.policy != "stretch"):
            return None
        # where onnxruntime departs from the spec beyond rounding, the spec's values stand (the
        # separable passes): align_corners and tf_crop_and_resize divide by the rounded output
        # length there, not by scale x input; pytorch_half_pixel maps a length-1 output to 0
        for axis, out_len, scale, _ in steps:
            unrounded = np.float32(scale) * np.float32(x.shape[axis]) != np.float32(out_len)
            if (self.coord in ("align_corners", "tf_crop_and_resize") and unrounded
                    or self.coord == "pytorch_half_pixel" and out_len == 1):
                return None
        resized = {axis for axis, _, _, _ in steps}
        if x.ndim in (2, 3):
            return tuple(range(x.ndim))
        if x.ndim == 4 and not resized & {0, 1}:
            return (2, 3)
        if x.ndim == 4 and not resized & {0, 3}:
            return (1, 2)
        if x.ndim == 5 and not resized & {0, 1}:
            return (2, 3, 4)
        return None

    def _exact_linear(self, x: np.ndarray, spatial: tuple[int, ...], steps) -> np.ndarray:
        """Linear Resize as onnxruntime's CPU kernel computes it, to the bit: per output pixel the
        sum over the 2 (or 2 x 2 x 2) corners, the innermost axis fastest, of the product of the
        axes' float32 weights (innermost first) times the input value, left to right in float32;
        integers truncated. (The separable passes round differently: one ulp on a fifth of a
        float32 upsample, which a quantized model's next DynamicQuantizeLinear turns into a
        different code, and one unit on 40% of a uint8 one.)"""
        by_axis = {axis: (out_len, scale, pair) for axis, out_len, scale, pair in steps}
        geometry = []  # per spatial axis, outermost first: (indices 1 and 2, weights for 1 and 2, outside)
        out_shape = list(x.shape)
        for axis in spatial:
            out_len, scale, pair = by_axis.get(axis, (x.shape[axis], 1.0, None))
            out_shape[axis] = out_len
            geometry.append(self._exact_axis(out_len, x.shape[axis], scale, pair))
        shape_at = [[1] * x.ndim for _ in spatial]
        for k, axis in enumerate(spatial):
            shape_at[k][axis] = out_shape[axis]
        # 8-bit NHWC: onnxruntime's fixed-point kernel, weights of 10 bits an axis, the sum
        # divided by 2^20 with truncation
        fixed = spatial == (1, 2) and x.ndim == 4 and x.dtype.itemsize == 1
        loop = _jit.bilinear() if spatial[-2:] == (x.ndim - 2, x.ndim - 1) and len(spatial) == 2 else None
        if loop is not None and not fixed:  # the last two axes: the compiled loop
            (y1, y2, dy1, dy2, y_out), (x1, x2, dx1, dx2, x_out) = (g[:5] for g in geometry)
            planes = x.reshape((-1,) + x.shape[-2:]).astype(np.float32, copy=False)
            y = np.empty(out_shape, np.float32)
            loop(np.ascontiguousarray(planes), y1, y2, x1, x2, dy1, dy2, dx1, dx2, y.reshape((-1,) + y.shape[-2:]))
            if self.coord == "tf_crop_and_resize":
                y[..., y_out[:, None] | x_out[None, :]] = np.float32(self.extrapolation)
            return y if x.dtype == np.float32 else y.astype(x.dtype)
        values = x.astype(np.int64 if fixed else np.float32, copy=False)
        first_weight = 6 if fixed else 3  # index 1 takes the weight of index 2, and so on
        y = None
        for corner in itertools.product((0, 1), repeat=len(spatial)):  # the innermost axis fastest
            gathered = values
            for k, axis in enumerate(spatial):
                gathered = np.take(gathered, geometry[k][corner[k]], axis=axis)
            weight = None
            for k in reversed(range(len(spatial))):  # the innermost axis' weight first
                w = geometry[k][first_weight - corner[k]].reshape(shape_at[k])
                weight = w if weight is None else weight * w
            term = weight * gathered
            y = term if y is None else np.add(y, term, out=y)
        if fixed:
            y = np.sign(y) * (np.abs(y) >> 20)  # C's division: toward zero
        if self.coord == "tf_crop_and_resize":
            outside = np.zeros(out_shape, dtype=bool)
            for k in range(len(spatial)):
                outside |= geometry[k][4].reshape(shape_at[k])
            y[outside] = np.float32(self.extrapolation) if not fixed else int(self.extrapolation)
        return y if y.dtype == x.dtype else y.astype(x.dtype)  # (float to integer: C's truncation)

    def _exact_axis(self, out_len: int, in_len: int, scale: float, pair):
        """onnxruntime's linear geometry of one axis, in float32: (first index, second index,
        first weight, second weight, outside the input); kept per arguments."""
        key = ("exact", out_len, in_len, scale, None if pair is None else (float(pair[0]), float(pair[1])))
        cached = self._geometry.get(key)
        if cached is not None:
            return cached
        original = _float32_coords(self.coord, out_len, in_len, scale, pair)
        f32 = np.float32
        clamped = np.maximum(f32(0), np.minimum(original, f32(in_len - 1)))
        first = np.minimum(clamped.astype(np.int64), in_len - 1)
        second = np.minimum(first + 1, in_len - 1)
        d1 = np.abs(clamped - first.astype(f32))
        d2 = np.abs(clamped - second.astype(f32))
        same = first == second
        d1[same] = f32(0.5)
        d2[same] = f32(0.5)
        outside = (original < 0) | (original > f32(in_len - 1))
        # the same weights in 10-bit fixed point (the 8-bit NHWC kernel's)
        scaled = (clamped * f32(1 << 10)).astype(np.int64)
        d1_fixed, d2_fixed = np.abs(scaled - first * (1 << 10)), np.abs(scaled - second * (1 << 10))
        d1_fixed[same] = d2_fixed[same] = 1 << 9
        result = (first, second, d1, d2, outside, d1_fixed, d2_fixed)
        if len(self._geometry) > 64:
            self._geometry.clear()
        self._geometry[key] = result
        return result

    def _axis_geometry(self, out_len: int, in_len: int, scale: float, pair):
        """Indices/weights of one resized axis; they depend only on these arguments, so they are
        computed once per input shape and reused by later runs."""
        key = (out_len, in_len, scale, None if pair is None else (float(pair[0]), float(pair[1])))
        cached = self._geometry.get(key)
        if cached is not None:
            return cached
        src = _source_coords(self.coord, out_len, in_len, scale, pair)
        if self.mode == "nearest":
            idx = np.clip(_nearest_index(src, self.nearest_mode, scale), 0, in_len - 1)
            result = (idx, src, _repeat_factor(idx, in_len))
        else:
            positions, w = _taps(src, self.mode, scale, self.antialias, self.cubic_a, self.exclude_outside, in_len)
            periodic = not self.exclude_outside and self.coord != "tf_crop_and_resize"
            phases = _phase_taps(positions, w, in_len) if periodic else None
            result = (phases, np.clip(positions, 0, in_len - 1), w, src)
        if len(self._geometry) > 64:
            self._geometry.clear()
        self._geometry[key] = result
        return result

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


@kernel("Upsample", since=1)
def _upsample_v1(node, request):
    # Upsample-1: 4-D input, scales only for H and W, as attributes height_scale/width_scale
    spec = _ResizeSpec(node, 10)
    scales = np.array([1.0, 1.0, float(node.attr("height_scale")), float(node.attr("width_scale"))], dtype=np.float32)
    return lambda x: spec.run(x, scales=scales)


@kernel("Upsample", since=7)
def _upsample_v7(node, request):
    spec = _ResizeSpec(node, 10)
    scales = np.asarray(node.attr("scales"), dtype=np.float32)
    return lambda x: spec.run(x, scales=scales)


@kernel("Upsample", since=9)
def _upsample_v9(node, request):
    spec = _ResizeSpec(node, 10)
    return lambda x, scales: spec.run(x, scales=scales)


# --- GridSample / AffineGrid ----------------------------------------------------------------


def _reflect(v: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Fold coordinates into [lo, hi] by reflecting at the borders as often as needed."""
    span = hi - lo
    if span <= 0:
        return np.full_like(v, lo)
    below, above = lo - v, v - hi
    d = np.where(v < lo, below, above)
    n = np.trunc(d / span)
    r = d - n * span
    even = (n % 2) == 0
    low_side = np.where(even, lo + r, hi - r)
    high_side = np.where(even, hi - r, lo + r)
    return np.where(v < lo, low_side, np.where(v > hi, high_side, v))


def _grid_sample_builder(node, request):
    mode = _text(node.attr("mode"), "bilinear" if node.opset < 20 else "linear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    if mode not in ("linear", "nearest", "cubic"):
        raise ValueError(f"GridSample {node.name!r}: attribute mode={mode!r}; valid values: linear, nearest, cubic")
    padding = _choice(node, "padding_mode", "zeros", ("zeros", "border", "reflection"))
    align = bool(node.attr("align_corners", 0))

    def grid_sample(x, grid):
        n, c = x.shape[:2]
        dims = x.shape[2:]
        nd = len(dims)
        out_spatial = grid.shape[1:-1]
        if n == 0 or c == 0 or 0 in out_spatial:  # nothing to sample (reshape's -1 is unknown there)
            return np.zeros((n, c) + tuple(out_spatial), x.dtype)
        if (mode == "linear" and padding != "reflection" and nd == 2 and x.dtype in JIT_FLOATS
                and grid.shape[-1] == 2 and grid.shape[0] == n and (loop := _jit.grid_linear()) is not None):
            y = np.empty((n, c, math.prod(out_spatial)), dtype=x.dtype)
            loop(np.ascontiguousarray(x).reshape(n, c, -1), np.ascontiguousarray(grid).reshape(n, -1, 2), dims[0], dims[1],
                 align, padding == "border", y)
            return y.reshape((n, c) + tuple(out_spatial))
        g = grid.reshape(n, -1, nd).astype(np.float64)
        per_dim = []  # for each spatial dim: (indices (N, P, T), weights (N, P, T))
        for d, size in enumerate(dims):
            v = g[..., nd - 1 - d]  # the grid's last axis lists coordinates as (x, y, z): reversed dims
            v = (v + 1) / 2 * (size - 1) if align else ((v + 1) * size - 1) / 2
            lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
            if mode == "nearest":
                v = np.rint(v)
            if padding == "border":
                v = np.where((v < lo) | (v > hi), np.clip(v, 0, size - 1), v)
            elif padding == "reflection":
                v = _reflect(v, lo, hi)
            if mode == "nearest":
                idx, w = v[..., None], np.ones(v.shape + (1,))
            else:
                base = np.floor(v)
                frac = (v - base)[..., None]
                if mode == "linear":
                    idx = base[..., None] + np.arange(2)
                    w = np.concatenate([1 - frac, frac], axis=-1)
                else:
                    idx = base[..., None] + np.arange(-1, 3)
                    w = _cubic(idx - v[..., None], -0.75)
            if padding == "zeros":
                w = np.where((idx < 0) | (idx >= size), 0.0, w)
                idx = np.clip(idx, 0, size - 1)
            elif padding == "border":
                idx = np.clip(idx, 0, size - 1)
            else:
                idx = np.clip(np.trunc(_reflect(idx, lo, hi)), 0, size - 1)
            per_dim.append((idx.astype(np.int64), w))
        work = np.float64 if x.dtype == np.float64 else np.float32
        strides = np.cumprod((1,) + dims[::-1])[:-1][::-1]
        loop = _jit.grid_taps()
        if loop is not None and x.dtype in JIT_FLOATS:
            taps = list(itertools.product(*(range(i.shape[-1]) for i, _ in per_dim)))
            lin = np.stack([sum(per_dim[d][0][..., t] * strides[d] for d, t in enumerate(tap)) for tap in taps], axis=-1)
            weight = np.stack([np.prod([per_dim[d][1][..., t] for d, t in enumerate(tap)], axis=0) for tap in taps],
                              axis=-1).astype(work)
            y = np.empty((n, c, g.shape[1]), dtype=work)
            loop(np.ascontiguousarray(x).reshape(n, c, -1), np.ascontiguousarray(lin, dtype=np.int64), weight, y)
            return y.reshape((n, c) + tuple(out_spatial))
        # channels last, so that every tap gathers whole C-vectors: (N, H*W, C)
        flat = np.ascontiguousarray(x.reshape(n, c, -1).transpose(0, 2, 1)).astype(work, copy=False)
        out = np.zeros((n, g.shape[1], c), dtype=work)
        rows = np.arange(n)[:, None]
        for taps in itertools.product(*(range(i.shape[-1]) for i, _ in per_dim)):
            lin = sum(per_dim[d][0][..., t] * strides[d] for d, t in enumerate(taps))
            weight = np.prod([per_dim[d][1][..., t] for d, t in enumerate(taps)], axis=0).astype(work)
            out += flat[rows, lin] * weight[:, :, None]
        return out.transpose(0, 2, 1).reshape((n, c) + tuple(out_spatial)).astype(x.dtype)

    return grid_sample


kernel("GridSample", since=16)(_grid_sample_builder)
kernel("GridSample", since=20)(_grid_sample_builder)
kernel("GridSample", since=22)(_grid_sample_builder)


@kernel("AffineGrid", since=20)
def _affine_grid(node, request):
    align = bool(node.attr("align_corners", 0))

    def affine_grid(theta, size):
        dims = [int(v) for v in np.asarray(size).reshape(-1)[2:]]
        axes = []
        for s in dims:
            if align:
                axes.append(np.linspace(-1, 1, s) if s > 1 else np.zeros(s))
            else:
                axes.append((np.arange(s) * 2 + 1) / s - 1)
        mesh = np.meshgrid(*axes, indexing="ij")  # per spatial dim, (D,) H, W
        # homogeneous points ordered (x, y[, z], 1): the innermost dim first
        points = np.stack([m.reshape(-1) for m in mesh[::-1]] + [np.ones(mesh[0].size)], axis=-1)
        grid = (points.astype(theta.dtype) @ np.swapaxes(theta, 1, 2)).astype(theta.dtype)  # (N, P, nd)
        return grid.reshape((theta.shape[0],) + tuple(dims) + (len(dims),))

    return affine_grid


# --- region ops -----------------------------------------------------------------------------


def _roi_align_builder(node, request):
    mode = _choice(node, "mode", "avg", ("avg", "max"))
    out_h, out_w = int(node.attr("output_height", 1)), int(node.attr("output_width", 1))
    ratio = int(node.attr("sampling_ratio", 0))
    scale = float(node.attr("spatial_scale", 1.0))
    if node.opset >= 16:
        half_pixel = _choice(node, "coordinate_transformation_mode", "half_pixel", ("half_pixel", "output_half_pixel")) == "half_pixel"
    else:
        half_pixel = False

    def axis_samples(start, length, bins, grid, size):
        """Sample positions along one axis for S regions: low/high indices and their weights,
        each (S, bins*grid); samples more than one pixel outside the image weigh 0."""
        frac_pos = (np.arange(bins)[:, None] + (np.arange(grid)[None, :] + 0.5) / grid).reshape(-1)
        pos = start[:, None] + frac_pos[None, :] * (length / bins)[:, None]
        valid = (pos >= -1.0) & (pos <= size)
        pos = np.maximum(pos, 0.0)
        low = np.floor(pos).astype(np.int64)
        at_end = low >= size - 1
        low = np.where(at_end, size - 1, low)
        high = np.where(at_end, size - 1, low + 1)
        pos = np.where(at_end, low, pos)
        frac = pos - low
        return low, high, (1 - frac) * valid, frac * valid

    def compiled(x, rois, batch_indices) -> np.ndarray | None:
        loop = _jit.roi_align()
        if loop is None or x.dtype != np.float32 or x.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 4:
            return None
        bidx = np.asarray(batch_indices, dtype=np.int64).reshape(-1)
        if bidx.size != rois.shape[0] or (bidx.size and (bidx.min() < 0 or bidx.max() >= x.shape[0])):
            return None  # numpy's path names the bad index
        y = np.empty((rois.shape[0], out_h, out_w, x.shape[1]), np.float32)
        loop(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), np.ascontiguousarray(rois, dtype=np.float32), bidx,
             np.float32(scale), np.float32(0.5 if half_pixel else 0.0), half_pixel, ratio, mode == "max", y)
        return np.ascontiguousarray(y.transpose(0, 3, 1, 2))

    def roi_align(x, rois, batch_indices):
        y = compiled(x, rois, batch_indices)
        if y is not None:
            return y
        _, c, h, w = x.shape
        offset = 0.5 if half_pixel else 0.0
        r = rois.astype(np.float64) * scale - offset
        x1, y1 = r[:, 0], r[:, 1]
        rw, rh = r[:, 2] - x1, r[:, 3] - y1
        if not half_pixel:
            rw, rh = np.maximum(rw, 1.0), np.maximum(rh, 1.0)
        gh = np.full(len(r), ratio) if ratio > 0 else np.ceil(rh / out_h).astype(np.int64)
        gw = np.full(len(r), ratio) if ratio > 0 else np.ceil(rw / out_w).astype(np.int64)
        bidx = batch_indices.astype(np.int64)
        out = np.zeros((len(r), c, out_h, out_w), dtype=x.dtype)
        xt = np.ascontiguousarray(x.transpose(0, 2, 3, 1))  # channels last: each gather takes a C-vector
        # regions with the same sampling grid are done together (one group when sampling_ratio > 0)
        for sh, sw in sorted(set(zip(gh.tolist(), gw.tolist()))):
            sel = np.nonzero((gh == sh) & (gw == sw))[0]
            if sh <= 0 or sw <= 0:
                continue  # an empty region: no samples, output stays 0
            ylo, yhi, wy0, wy1 = axis_samples(y1[sel], rh[sel], out_h, sh, h)
            xlo, xhi, wx0, wx1 = axis_samples(x1[sel], rw[sel], out_w, sw, w)
            b = bidx[sel][:, None, None]

            def corner(yi, xi, wy, wx, b=b):
                # (S, Y, X, C) values times their bilinear weights
                return xt[b, yi[:, :, None], xi[:, None, :]] * (wy[:, :, None] * wx[:, None, :])[..., None]

            corners = [corner(ylo, xlo, wy0, wx0), corner(ylo, xhi, wy0, wx1), corner(yhi, xlo, wy1, wx0), corner(yhi, xhi, wy1, wx1)]
            if mode == "avg":
                val = sum(corners).reshape(len(sel), out_h, sh, out_w, sw, c).mean(axis=(2, 4))
            else:  # onnxruntime's max mode: the largest weighted corner over all samples of a bin
                val = np.maximum(np.maximum(corners[0], corners[1]), np.maximum(corners[2], corners[3]))
                val = val.reshape(len(sel), out_h, sh, out_w, sw, c).max(axis=(2, 4))
            out[sel] = val.transpose(0, 3, 1, 2)
        return out

    return roi_align


kernel("RoiAlign", since=10)(_roi_align_builder)
kernel("RoiAlign", since=16)(_roi_align_builder)
kernel("RoiAlign", since=22)(_roi_align_builder)


@kernel("MaxRoiPool", since=1)
def _max_roi_pool(node, request):
    ph_n, pw_n = (int(v) for v in node.attr("pooled_shape"))
    scale = float(node.attr("spatial_scale", 1.0))

    def max_roi_pool(x, rois):
        _, c, h, w = x.shape
        out = np.zeros((rois.shape[0], c, ph_n, pw_n), dtype=x.dtype)
        for k in range(rois.shape[0]):
            b = int(rois[k, 0])
            # C's round(): halves away from zero (numpy's round goes to even)
            x1, y1, x2, y2 = (int(math.copysign(math.floor(abs(float(v) * scale) + 0.5), float(v))) for v in rois[k, 1:5])
            bin_h = max(y2 - y1 + 1, 1) / ph_n
            bin_w = max(x2 - x1 + 1, 1) / pw_n
            for i in range(ph_n):  # loops over the pooled bins; each bin is one vectorised max
                hs = min(max(int(math.floor(i * bin_h)) + y1, 0), h)
                he = min(max(int(math.ceil((i + 1) * bin_h)) + y1, 0), h)
                for j in range(pw_n):
                    ws = min(max(int(math.floor(j * bin_w)) + x1, 0), w)
                    we = min(max(int(math.ceil((j + 1) * bin_w)) + x1, 0), w)
                    if he > hs and we > ws:
                        out[k, :, i, j] = x[b, :, hs:he, ws:we].max(axis=(1, 2))
        return out

    return max_roi_pool


def _corners(boxes: np.ndarray, center_point_box: bool):
    """(y1, x1, y2, x2) float64 columns with y1 <= y2 and x1 <= x2."""
    b = boxes.astype(np.float32 if boxes.dtype == np.float32 else np.float64)  # float32 like onnxruntime
    if center_point_box:  # [x_center, y_center, width, height]
        return b[:, 1] - b[:, 3] / 2, b[:, 0] - b[:, 2] / 2, b[:, 1] + b[:, 3] / 2, b[:, 0] + b[:, 2] / 2
    # [y1, x1, y2, x2] with the corners in either order
    return (np.minimum(b[:, 0], b[:, 2]), np.minimum(b[:, 1], b[:, 3]), np.maximum(b[:, 0], b[:, 2]), np.maximum(b[:, 1], b[:, 3]))


def _greedy_nms(corners, area, order: np.ndarray, iou_thr: float, limit: int, block: int = 64) -> list[int]:
    """Keep the best box, drop the later boxes that overlap it by more than iou_thr, repeat.

    Candidates are gathered once in score order. The IoU of the next ``block`` live candidates
    against every later candidate is one vectorised (block x tail) computation; the greedy walk
    through the block then costs one boolean row update per kept box."""
    y1, x1, y2, x2 = (c[order] for c in corners)
    ar = area[order]
    m = order.size
    alive = np.ones(m, bool)
    kept: list[int] = []
    pos = 0
    while len(kept) < limit and pos < m:
        blk = np.flatnonzero(alive[pos:])[:block] + pos
        if blk.size == 0:
            break
        lo = int(blk[0])
        ih = np.minimum(y2[blk, None], y2[None, lo:]) - np.maximum(y1[blk, None], y1[None, lo:])
        iw = np.minimum(x2[blk, None], x2[None, lo:]) - np.maximum(x1[blk, None], x1[None, lo:])
        inter = np.maximum(ih, 0.0) * np.maximum(iw, 0.0)
        union = ar[blk, None] + ar[None, lo:] - inter
        with np.errstate(invalid="ignore", divide="ignore"):
            valid = (ar[blk, None] > 0) & (ar[None, lo:] > 0) & (union > 0)
            overlaps = valid & (inter / np.where(union > 0, union, 1.0) > iou_thr)  # (block, m - lo)
        for j, i in enumerate(blk.tolist()):
            if not alive[i]:
                continue  # suppressed by a box kept earlier in this block
            kept.append(int(order[i]))
            if len(kept) >= limit:
                break
            alive[lo:] &= ~overlaps[j]  # also clears i itself and earlier, already decided boxes
        pos = int(blk[-1]) + 1
    return kept


@kernel("NonMaxSuppression", since=10)
def _nms(node, request):
    center = bool(node.attr("center_point_box", 0))

    def first(v, default, cast):
        return default if v is None or np.size(v) == 0 else cast(np.asarray(v).reshape(-1)[0])

    def nms(boxes, scores, max_output=None, iou_threshold=None, score_threshold=None):
        limit = first(max_output, 0, int)
        iou_thr = first(iou_threshold, 0.0, float)
        has_thr = score_threshold is not None and np.size(score_threshold) > 0
        thr = first(score_threshold, 0.0, float)
        selected = []
        if limit <= 0:
            return np.zeros((0, 3), np.int64)
        for b in range(boxes.shape[0]):
            corners = _corners(boxes[b], center)
            area = (corners[2] - corners[0]) * (corners[3] - corners[1])
            for cls in range(scores.shape[1]):
                s = scores[b, cls]
                order = np.argsort(-s.astype(np.float64), kind="stable")  # ties: lower index first
                if has_thr:
                    order = order[s[order] > thr]
                selected.extend((b, cls, i) for i in _greedy_nms(corners, area, order, iou_thr, limit))
        return np.array(selected, dtype=np.int64).reshape(-1, 3)

    return nms
