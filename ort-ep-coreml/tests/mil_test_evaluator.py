"""TEST-ONLY numpy evaluator of saved Core ML ML Programs (the ops ort-ep-coreml's packages hold).

Core ML cannot run on Linux, so the tests check the numbers with this: it reads a saved
``.mlpackage`` (the protobuf through ``coremltools.utils.load_spec``, weights through
coremltools' blob reader), not the lowering's own objects, and computes each MIL op as
coremltools' MIL op documentation (``coremltools.converters.mil.mil.ops.defs``) defines it. Its
results are compared with onnxruntime: a wrong layout, pad order, axis or attribute in the
lowering shows up as wrong numbers. It is not part of the provider and is not Core ML: where
Core ML itself differs from its documentation, only the macOS tests can tell.

``MilTestEvaluator(package).predict(feeds)`` has ``MLModel.predict``'s shape, so the provider's
kernel can be run with it in place of Core ML.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

_DTYPES = {"STRING": object, "BOOL": np.bool_, "FLOAT16": np.float16, "FLOAT32": np.float32, "INT32": np.int32,
           "INT8": np.int8, "UINT8": np.uint8, "INT16": np.int16, "UINT16": np.uint16, "INT64": np.int64}
_MIL_CAST = {"fp32": np.float32, "fp16": np.float16, "int32": np.int32, "bool": np.bool_}


class Unsupported(Exception):
    """The evaluator has no implementation of an op the package holds (extend it)."""


class MilTestEvaluator:
    def __init__(self, package: str | Path):
        import coremltools as ct
        from coremltools.proto import MIL_pb2

        self.package = Path(package)
        self.spec = ct.utils.load_spec(str(package))
        self._names = {v: k for k, v in MIL_pb2.DataType.items()}
        function = self.spec.mlProgram.functions["main"]
        self.inputs = [(i.name, i.type) for i in function.inputs]
        self.block = function.block_specializations[function.opset]
        self.op_types = [op.type for op in self.block.operations]
        self._reader = None

    # ------------------------------------------------------------------ values
    def _dtype(self, tensor_type: Any) -> type:
        name = self._names[tensor_type.dataType]
        if name not in _DTYPES:
            raise Unsupported(f"data type {name}")
        return _DTYPES[name]

    def _value(self, value: Any) -> Any:
        t = value.type.tensorType
        dtype = self._dtype(t)
        shape = [d.constant.size for d in t.dimensions]
        if value.HasField("blobFileValue"):
            return self._blob(value.blobFileValue.offset, dtype).reshape(shape)
        tensor = value.immediateValue.tensor
        kind = tensor.WhichOneof("value")
        if kind == "strings":
            values = list(tensor.strings.values)
            return values[0] if not shape else np.array(values)
        if kind == "bytes":
            data = np.frombuffer(tensor.bytes.values, dtype=dtype)
        elif kind is None:
            data = np.zeros(0, dtype)
        else:
            data = np.array(list(getattr(tensor, kind).values), dtype=dtype)
        return data.reshape(shape)

    def _blob(self, offset: int, dtype: type) -> np.ndarray:
        if self._reader is None:
            from coremltools.libmilstoragepython import _BlobStorageReader

            self._reader = _BlobStorageReader(str(self.package / "Data" / "com.apple.CoreML" / "weights" / "weight.bin"))
        read = {np.float32: self._reader.read_float_data, np.float16: self._reader.read_fp16_data,
                np.int32: self._reader.read_int32_data, np.int8: self._reader.read_int8_data,
                np.uint8: self._reader.read_uint8_data}[dtype]
        data = np.array(read(offset))
        return data.view(np.float16) if dtype is np.float16 and data.dtype != np.float16 else data.astype(dtype)

    # ------------------------------------------------------------------ run
    def predict(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        env: dict[str, Any] = {}
        for name, _ in self.inputs:
            env[name] = np.asarray(feeds[name])
        for op in self.block.operations:
            if op.type == "const":
                env[op.outputs[0].name] = self._value(op.attributes["val"])
                continue
            args: dict[str, Any] = {}
            for param, argument in op.inputs.items():
                items = [env[b.name] if b.name else self._value(b.value) for b in argument.arguments]
                args[param] = items if param == "values" else items[0]
            impl = _OPS.get(op.type)
            if impl is None:
                raise Unsupported(f"MIL op {op.type!r} has no test implementation")
            result = impl(**args)
            results = result if isinstance(result, (list, tuple)) else [result]
            for out, value in zip(op.outputs, results):
                env[out.name] = np.asarray(value, dtype=self._dtype(out.type.tensorType))
        return {name: env[name] for name in self.block.outputs}


# -------------------------------------------------------------------------------- the ops
def _f(x: Any) -> Any:
    return x.item() if isinstance(x, np.ndarray) and x.ndim == 0 else x


def _ints(x: Any) -> list[int]:
    return [int(v) for v in np.asarray(x).reshape(-1)]


def _pads(x: np.ndarray, kernel: list[int], strides: list[int], dilations: list[int], pad_type: str, pad: Any,
          ceil: bool = False) -> list[tuple[int, int]]:
    """(begin, end) per spatial axis, as MIL's pad_type/pad give them."""
    spatial = x.ndim - 2
    if pad_type == "valid":
        return [(0, 0)] * spatial
    if pad_type == "custom":
        p = _ints(pad)
        return [(p[2 * k], p[2 * k + 1]) for k in range(spatial)]
    result = []
    for k in range(spatial):
        size = x.shape[2 + k]
        out = -(-size // strides[k])
        total = max(0, (out - 1) * strides[k] + (kernel[k] - 1) * dilations[k] + 1 - size)
        small, big = total // 2, total - total // 2
        result.append((small, big) if pad_type == "same" else (big, small))
    return result


def _windows(x: np.ndarray, kernel: list[int], strides: list[int], dilations: list[int]) -> tuple[list[int], list]:
    """Output spatial size and, per kernel offset, the strided view of x it reads."""
    spatial = x.ndim - 2
    out = [(x.shape[2 + k] - ((kernel[k] - 1) * dilations[k] + 1)) // strides[k] + 1 for k in range(spatial)]
    views = []
    for offset in np.ndindex(*kernel):
        index = [slice(None), slice(None)]
        for k in range(spatial):
            start = offset[k] * dilations[k]
            index.append(slice(start, start + (out[k] - 1) * strides[k] + 1, strides[k]))
        views.append((offset, x[tuple(index)]))
    return out, views


def conv(x, weight, strides=None, pad_type="valid", pad=None, dilations=None, groups=1, bias=None):
    spatial = x.ndim - 2
    strides = _ints(strides) if strides is not None else [1] * spatial
    dilations = _ints(dilations) if dilations is not None else [1] * spatial
    kernel = list(weight.shape[2:])
    pads = _pads(x, kernel, strides, dilations, _f(pad_type), pad)
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), *pads])
    g = int(_f(groups))
    cout = weight.shape[0]
    cin_g = weight.shape[1]
    out_sizes, views = _windows(xp, kernel, strides, dilations)
    y = np.zeros((x.shape[0], cout, *out_sizes))
    w = weight.astype(np.float64).reshape(g, cout // g, cin_g, *kernel)
    for offset, view in views:
        v = view.reshape(x.shape[0], g, cin_g, *out_sizes)
        wk = w[(slice(None), slice(None), slice(None), *offset)]  # [g, cout/g, cin_g]
        y += np.einsum("ngc...,goc->ngo...", v, wk).reshape(y.shape)
    if bias is not None:
        y += bias.astype(np.float64).reshape(1, -1, *([1] * spatial))
    return y


def conv_transpose(x, weight, strides=None, pad_type="valid", pad=None, dilations=None, groups=1, bias=None,
                   output_shape=None):
    spatial = x.ndim - 2
    strides = _ints(strides) if strides is not None else [1] * spatial
    dilations = _ints(dilations) if dilations is not None else [1] * spatial
    if _f(pad_type) != "custom":
        raise Unsupported(f"conv_transpose pad_type {_f(pad_type)}")
    p = _ints(pad)
    g = int(_f(groups))
    cin, cout_g = weight.shape[0], weight.shape[1]
    kernel = list(weight.shape[2:])
    full = [(x.shape[2 + k] - 1) * strides[k] + (kernel[k] - 1) * dilations[k] + 1 for k in range(spatial)]
    y = np.zeros((x.shape[0], g * cout_g, *full))
    xg = x.astype(np.float64).reshape(x.shape[0], g, cin // g, *x.shape[2:])
    w = weight.astype(np.float64).reshape(g, cin // g, cout_g, *kernel)
    for offset in np.ndindex(*kernel):
        contrib = np.einsum("ngc...,gco->ngo...", xg, w[(slice(None), slice(None), slice(None), *offset)])
        index = [slice(None), slice(None)]
        for k in range(spatial):
            start = offset[k] * dilations[k]
            index.append(slice(start, start + (x.shape[2 + k] - 1) * strides[k] + 1, strides[k]))
        y[tuple(index)] += contrib.reshape(x.shape[0], g * cout_g, *x.shape[2:])
    crop = [slice(None), slice(None)] + [slice(p[2 * k], full[k] - p[2 * k + 1]) for k in range(spatial)]
    y = y[tuple(crop)]
    if bias is not None:
        y += bias.astype(np.float64).reshape(1, -1, *([1] * spatial))
    return y


def _pool(x, kernel_sizes, strides, pad_type, pad, reduce: Callable, fill: float, exclude=True, ceil_mode=False):
    if _f(ceil_mode):
        raise Unsupported("ceil_mode")
    spatial = x.ndim - 2
    kernel = _ints(kernel_sizes)
    strides = _ints(strides) if strides is not None else [1] * spatial
    pads = _pads(x, kernel, strides, [1] * spatial, _f(pad_type), pad)
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), *pads], constant_values=fill)
    ones = np.pad(np.ones(x.shape[2:]), pads)
    _, views = _windows(xp, kernel, strides, [1] * spatial)
    _, counts = _windows(ones[None, None], kernel, strides, [1] * spatial)
    stacked = np.stack([v for _, v in views])
    if reduce is np.max:
        return stacked.max(axis=0)
    total = stacked.sum(axis=0)
    n = np.stack([c for _, c in counts]).sum(axis=0) if exclude else float(np.prod(kernel))
    return total / n


def max_pool(x, kernel_sizes, strides=None, pad_type="valid", pad=None, ceil_mode=False):
    return _pool(x, kernel_sizes, strides, pad_type, pad, np.max, -np.inf, ceil_mode=ceil_mode)


def avg_pool(x, kernel_sizes, strides=None, pad_type="valid", pad=None, exclude_padding_from_average=False, ceil_mode=False):
    return _pool(x, kernel_sizes, strides, pad_type, pad, np.mean, 0.0, bool(_f(exclude_padding_from_average)), ceil_mode)


def _axes(x, axes):
    return tuple(range(x.ndim)) if axes is None else tuple(int(a) % x.ndim for a in np.asarray(axes).reshape(-1))


def _reducer(fn):
    def reduce(x, axes=None, keep_dims=False):
        return fn(x.astype(np.float64) if x.dtype.kind == "f" else x, axis=_axes(x, axes), keepdims=bool(_f(keep_dims)))
    return reduce


def linear(x, weight, bias=None):
    y = x.astype(np.float64) @ weight.astype(np.float64).T
    return y if bias is None else y + bias


def matmul(x, y, transpose_x=False, transpose_y=False):
    a, b = x.astype(np.float64), y.astype(np.float64)
    if _f(transpose_x):
        a = np.swapaxes(a, -1, -2)
    if _f(transpose_y):
        b = np.swapaxes(b, -1, -2)
    return a @ b


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64))


def gelu(x, mode="EXACT"):
    x = x.astype(np.float64)
    mode = _f(mode)
    if mode == "EXACT":
        return 0.5 * x * (1 + _erf(x / math.sqrt(2)))
    if mode == "TANH_APPROXIMATION":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return x / (1 + np.exp(-1.702 * x))  # SIGMOID_APPROXIMATION


def softmax(x, axis=-1):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=int(_f(axis)), keepdims=True))
    return e / e.sum(axis=int(_f(axis)), keepdims=True)


def layer_norm(x, axes, gamma=None, beta=None, epsilon=1e-5):
    x = x.astype(np.float64)
    ax = _axes(x, axes)
    mean = x.mean(axis=ax, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=ax, keepdims=True)
    y = (x - mean) / np.sqrt(var + float(_f(epsilon)))
    if gamma is not None:
        y = y * gamma
    if beta is not None:
        y = y + beta
    return y


def batch_norm(x, mean, variance, gamma=None, beta=None, epsilon=1e-5):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (x.astype(np.float64) - mean.reshape(shape)) / np.sqrt(variance.reshape(shape) + float(_f(epsilon)))
    if gamma is not None:
        y = y * gamma.reshape(shape)
    if beta is not None:
        y = y + beta.reshape(shape)
    return y


def upsample_nearest_neighbor(x, scale_factor_height=1, scale_factor_width=1):
    sh, sw = float(_f(scale_factor_height)), float(_f(scale_factor_width))
    h, w = x.shape[-2:]
    rows = np.minimum((np.arange(int(h * sh)) / sh).astype(int), h - 1)
    cols = np.minimum((np.arange(int(w * sw)) / sw).astype(int), w - 1)
    return x[..., rows, :][..., cols]


def _grid(size_in: int, size_out: int, align: bool, half: bool) -> np.ndarray:
    i = np.arange(size_out, dtype=np.float64)
    if align:
        spacing = (size_in - 1) / (size_out - 1) if size_out > 1 else 0.0
        return np.clip(i * spacing, 0, size_in - 1)
    spacing = size_in / size_out
    offset = 0.5 * spacing - 0.5 if half else 0.0
    return np.clip(i * spacing + offset, 0, size_in - 1)


def upsample_bilinear(x, scale_factor_height=1, scale_factor_width=1, align_corners=True, half_pixel_centers=None):
    align = bool(_f(align_corners))
    half = (not align) if half_pixel_centers is None else bool(_f(half_pixel_centers))
    h, w = x.shape[-2:]
    oh, ow = int(h * float(_f(scale_factor_height))), int(w * float(_f(scale_factor_width)))
    y = x.astype(np.float64)
    for axis, (size_in, size_out) in ((-2, (h, oh)), (-1, (w, ow))):
        grid = _grid(size_in, size_out, align, half)
        lo = np.floor(grid).astype(int)
        hi = np.minimum(lo + 1, size_in - 1)
        frac = grid - lo
        a, b = np.take(y, lo, axis=axis), np.take(y, hi, axis=axis)
        shape = [1] * y.ndim
        shape[axis] = size_out
        y = a + (b - a) * frac.reshape(shape)
    return y


def slice_by_index(x, begin, end, stride=None, begin_mask=None, end_mask=None, squeeze_mask=None):
    rank = x.ndim
    begin, end = _ints(begin), _ints(end)
    stride = _ints(stride) if stride is not None else [1] * rank
    bm = [bool(v) for v in np.asarray(begin_mask).reshape(-1)] if begin_mask is not None else [False] * rank
    em = [bool(v) for v in np.asarray(end_mask).reshape(-1)] if end_mask is not None else [False] * rank
    sm = [bool(v) for v in np.asarray(squeeze_mask).reshape(-1)] if squeeze_mask is not None else [False] * rank
    index = []
    for k in range(rank):
        if sm[k]:
            index.append(begin[k])
            continue
        index.append(slice(None if bm[k] else begin[k], None if em[k] else end[k], stride[k]))
    return x[tuple(index)]


def split(x, axis, num_splits=None, split_sizes=None):
    axis = int(_f(axis))
    if split_sizes is not None:
        cuts = np.cumsum(_ints(split_sizes))[:-1]
        return np.split(x, cuts, axis=axis)
    return np.split(x, int(_f(num_splits)), axis=axis)


def concat(values, axis, interleave=False):
    if _f(interleave):
        raise Unsupported("concat interleave")
    return np.concatenate(values, axis=int(_f(axis)))


def reshape(x, shape):
    return x.reshape(_ints(shape))


def cast(x, dtype):
    return x.astype(_MIL_CAST[_f(dtype)])


def gather(x, indices, axis=0, batch_dims=0, validate_indices=False):
    if int(_f(batch_dims)):
        raise Unsupported("gather batch_dims")
    return np.take(x, indices.astype(np.int64), axis=int(_f(axis)))


def _binary(fn):
    def op(x, y):
        return fn(x.astype(np.float64) if x.dtype.kind == "f" else x, y.astype(np.float64) if y.dtype.kind == "f" else y)
    return op


def _unary(fn):
    def op(x):
        return fn(x.astype(np.float64))
    return op


_OPS: dict[str, Callable[..., Any]] = {
    "conv": conv, "conv_transpose": conv_transpose, "max_pool": max_pool, "avg_pool": avg_pool,
    "linear": linear, "matmul": matmul, "gelu": gelu, "softmax": softmax, "layer_norm": layer_norm,
    "batch_norm": batch_norm, "upsample_nearest_neighbor": upsample_nearest_neighbor,
    "upsample_bilinear": upsample_bilinear, "slice_by_index": slice_by_index, "split": split,
    "concat": concat, "reshape": reshape, "cast": cast, "gather": gather,
    "transpose": lambda x, perm: np.transpose(x, _ints(perm)),
    "expand_dims": lambda x, axes: np.expand_dims(x, tuple(int(a) for a in _ints(axes))),
    "squeeze": lambda x, axes=None: np.squeeze(x, axis=None if axes is None else tuple(_ints(axes))),
    "shape": lambda x: np.array(x.shape, np.int32),
    "identity": lambda x: x,
    "add": _binary(np.add), "sub": _binary(np.subtract), "mul": _binary(np.multiply),
    "real_div": _binary(np.divide), "pow": _binary(np.power), "maximum": _binary(np.maximum),
    "minimum": _binary(np.minimum), "equal": _binary(np.equal), "less": _binary(np.less),
    "greater": _binary(np.greater), "less_equal": _binary(np.less_equal), "greater_equal": _binary(np.greater_equal),
    "select": lambda cond, a, b: np.where(cond, a, b),
    "logical_not": lambda x: np.logical_not(x),
    "relu": _unary(lambda x: np.maximum(x, 0)), "sigmoid": _unary(lambda x: 1 / (1 + np.exp(-x))),
    "tanh": _unary(np.tanh), "exp": _unary(np.exp), "sqrt": _unary(np.sqrt), "erf": _erf, "abs": _unary(np.abs),
    "floor": _unary(np.floor), "ceil": _unary(np.ceil), "sin": _unary(np.sin), "cos": _unary(np.cos),
    "softsign": _unary(lambda x: x / (1 + np.abs(x))),
    "softplus": _unary(lambda x: np.logaddexp(0, x)),
    "log": lambda x, epsilon=1e-45: np.log(x.astype(np.float64) + float(_f(epsilon))),
    "leaky_relu": lambda x, alpha=0.01: np.where(x >= 0, x, float(_f(alpha)) * x.astype(np.float64)),
    "elu": lambda x, alpha=1.0: np.where(x > 0, x, float(_f(alpha)) * (np.exp(x.astype(np.float64)) - 1)),
    "sigmoid_hard": lambda x, alpha=0.2, beta=0.5: np.clip(float(_f(alpha)) * x.astype(np.float64) + float(_f(beta)), 0, 1),
    "clip": lambda x, alpha, beta: np.clip(x.astype(np.float64), float(_f(alpha)), float(_f(beta))),
    "reduce_mean": _reducer(np.mean), "reduce_sum": _reducer(np.sum), "reduce_max": _reducer(np.max),
    "reduce_min": _reducer(np.min), "reduce_prod": _reducer(np.prod),
}
