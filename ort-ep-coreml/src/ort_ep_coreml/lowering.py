"""ONNX nodes lowered to a MIL program with coremltools' builder (``mb.program``).

One function per ONNX op turns a node into MIL ops. A lowering that meets an attribute, dtype or
shape it cannot express exactly raises ``Decline`` with the reason; capability tries each
candidate node alone (see ``capability.py``) and reports that reason, so the group lowering
later meets only nodes that lowered alone.

Values: each ONNX value is either a MIL ``Var`` or, when known at build time (initializers,
Constant nodes), a numpy array. Core ML has no 64-bit integers: int64 values are int32 in the
program (constants are checked to fit) and the kernel converts at the boundary. float64 is
declined.

Layouts: MIL's conv, pooling and resize ops are channels-first like ONNX, and MIL's conv weight
is [C_out, C_in/groups, *K] like ONNX's, so no transposes are needed. Padding differs: ONNX
gives all the begins then all the ends ([b1, b2, e1, e2]); MIL wants (begin, end) per spatial
axis ([b1, e1, b2, e2]).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ort_core import GraphView, NodeView

from . import _ct

#: the deployment target of every package: macOS 13 / iOS 16 (float16 inputs need it)
TARGET_NAME = "iOS16"

FLOAT_TYPES = (np.dtype(np.float32), np.dtype(np.float16))
#: ONNX dtypes a lowered value may have (int64 travels as int32)
VALUE_TYPES = (*FLOAT_TYPES, np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.bool_))
_INT32 = np.iinfo(np.int32)


class Decline(Exception):
    """The node cannot be lowered exactly; ``str(exc)`` is the reason."""


def mil_dtype(dtype: np.dtype) -> Any:
    """The MIL scalar type of an ONNX value's numpy dtype (int64 -> int32)."""
    types = _ct.load().converters.mil.mil.types
    table = {"float32": types.fp32, "float16": types.fp16, "int32": types.int32,
             "int64": types.int32, "bool": types.bool}
    if dtype.name not in table:
        raise Decline(f"dtype {dtype.name} is not supported by Core ML ML Programs (float32, float16, int32, int64, bool)")
    return table[dtype.name]


def to_mil_const(value: np.ndarray, what: str) -> np.ndarray:
    """A constant as the program holds it: int64 -> int32 (when it fits), float64 declined."""
    if value.dtype == np.int64:
        if value.size and (value.min() < _INT32.min or value.max() > _INT32.max):
            raise Decline(f"{what} holds int64 values outside the int32 range Core ML has")
        return value.astype(np.int32)
    if value.dtype.name not in ("float32", "float16", "int32", "bool"):
        raise Decline(f"{what} is {value.dtype.name}; Core ML ML Programs take float32, float16, int32, int64, bool")
    return value


def safe_name(text: str) -> str:
    """A MIL identifier from an ONNX name."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", text) or "v"
    return name if name[0].isalpha() else f"v_{name}"


@dataclass
class _Ctx:
    graph: GraphView
    mb: Any
    env: dict[str, Any]  # ONNX value name -> MIL Var or numpy constant
    node: NodeView

    # ------------------------------------------------------------------ inputs
    def has(self, k: int) -> bool:
        return k < len(self.node.inputs) and bool(self.node.inputs[k])

    def x(self, k: int) -> Any:
        """Input ``k`` as MIL takes it (a Var, or a constant converted for Core ML)."""
        value = self.env[self.node.inputs[k]]
        if isinstance(value, np.ndarray):
            return to_mil_const(value, f"input {self.node.inputs[k]!r}")
        return value

    def const(self, k: int, what: str) -> np.ndarray:
        """Input ``k`` as a numpy array known at build time, else Decline."""
        value = self.env[self.node.inputs[k]]
        if isinstance(value, np.ndarray):
            return value
        if getattr(value, "val", None) is not None:  # MIL folded it (e.g. shape of a static input)
            return np.asarray(value.val)
        raise Decline(f"{self.node.op_type}: {what} (input {k}, {self.node.inputs[k]!r}) must be a constant")

    def shape(self, k: int) -> tuple[Any, ...]:
        """Input ``k``'s shape: ints, or MIL symbols for dynamic sizes."""
        value = self.env[self.node.inputs[k]]
        return tuple(value.shape)

    def rank(self, k: int) -> int:
        return len(self.shape(k))

    def dtype(self, k: int) -> np.dtype:
        value = self.env[self.node.inputs[k]]
        if isinstance(value, np.ndarray):
            return value.dtype
        return self.graph.value(self.node.inputs[k]).dtype or _numpy_of_mil(value.dtype)

    def attr(self, name: str, default: Any = None) -> Any:
        return self.node.attr(name, default)

    def name(self, suffix: str = "") -> str:
        return safe_name(self.node.name or f"{self.node.op_type}_{self.node.index}") + suffix

    def decline(self, why: str) -> Decline:
        return Decline(f"{self.node.op_type}: {why}")


def _numpy_of_mil(t: Any) -> np.dtype:
    types = _ct.load().converters.mil.mil.types
    return np.dtype(types.nptype_from_builtin(t))


def _axis(axis: int, rank: int, ctx: _Ctx) -> int:
    if not -rank <= axis < rank:
        raise ctx.decline(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


def _static(dims: Sequence[Any]) -> bool:
    return all(isinstance(d, (int, np.integer)) for d in dims)


# ---------------------------------------------------------------------------------------- ops
_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Sqrt": "sqrt",
          "Erf": "erf", "Abs": "abs", "Identity": "identity", "Floor": "floor", "Ceil": "ceil",
          "Sin": "sin", "Cos": "cos", "Softsign": "softsign"}
_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "real_div", "Pow": "pow",
           "Max": "maximum", "Min": "minimum"}
_COMPARE = {"Equal": "equal", "Less": "less", "Greater": "greater", "LessOrEqual": "less_equal",
            "GreaterOrEqual": "greater_equal"}
_REDUCE = {"ReduceMean": "reduce_mean", "ReduceSum": "reduce_sum", "ReduceMax": "reduce_max",
           "ReduceMin": "reduce_min", "ReduceProd": "reduce_prod"}


def _float_only(ctx: _Ctx, k: int = 0) -> None:
    if ctx.dtype(k) not in FLOAT_TYPES:
        raise ctx.decline(f"input dtype {ctx.dtype(k).name}; Core ML's op takes float32 or float16 here")


def _unary(ctx: _Ctx) -> list[Any]:
    if ctx.node.op_type != "Identity":
        _float_only(ctx)
    return [getattr(ctx.mb, _UNARY[ctx.node.op_type])(x=ctx.x(0), name=ctx.name())]


def _log(ctx: _Ctx) -> list[Any]:
    _float_only(ctx)
    # MIL's log adds epsilon (default 1e-45, a float32 denormal that is 0 in float16); 0 is exact
    return [ctx.mb.log(x=ctx.x(0), epsilon=0.0, name=ctx.name())]


def _neg(ctx: _Ctx) -> list[Any]:
    _float_only(ctx)
    return [ctx.mb.mul(x=ctx.x(0), y=np.array(-1, ctx.dtype(0)), name=ctx.name())]


def _reciprocal(ctx: _Ctx) -> list[Any]:
    _float_only(ctx)
    # not MIL's inverse, which adds epsilon (default 1e-4) to x
    return [ctx.mb.real_div(x=np.array(1, ctx.dtype(0)), y=ctx.x(0), name=ctx.name())]


def _binary(ctx: _Ctx) -> list[Any]:
    op = ctx.node.op_type
    if len([n for n in ctx.node.inputs if n]) != 2:
        raise ctx.decline("only the two-input form is supported")
    if ctx.dtype(0) != ctx.dtype(1):
        raise ctx.decline(f"inputs of different dtypes ({ctx.dtype(0).name}, {ctx.dtype(1).name})")
    if op == "Div" and ctx.dtype(0) not in FLOAT_TYPES:
        # ONNX integer Div truncates toward zero; MIL's floor_div floors
        raise ctx.decline(f"integer Div ({ctx.dtype(0).name}) truncates in ONNX; Core ML has floor division only")
    if op == "Pow":
        _float_only(ctx)
    if ctx.dtype(0) == np.bool_:
        raise ctx.decline("bool arithmetic")
    return [getattr(ctx.mb, _BINARY[op])(x=ctx.x(0), y=ctx.x(1), name=ctx.name())]


def _compare(ctx: _Ctx) -> list[Any]:
    if ctx.dtype(0) != ctx.dtype(1) or ctx.dtype(0) == np.bool_:
        raise ctx.decline(f"compares {ctx.dtype(0).name} with {ctx.dtype(1).name}; numeric inputs of one dtype only")
    return [getattr(ctx.mb, _COMPARE[ctx.node.op_type])(x=ctx.x(0), y=ctx.x(1), name=ctx.name())]


def _where(ctx: _Ctx) -> list[Any]:
    if ctx.dtype(1) != ctx.dtype(2) or ctx.dtype(1) == np.bool_:
        raise ctx.decline("branches of different dtypes, or bool branches")
    return [ctx.mb.select(cond=ctx.x(0), a=ctx.x(1), b=ctx.x(2), name=ctx.name())]


def _not(ctx: _Ctx) -> list[Any]:
    return [ctx.mb.logical_not(x=ctx.x(0), name=ctx.name())]


def _leaky_relu(ctx: _Ctx) -> list[Any]:
    _float_only(ctx)
    return [ctx.mb.leaky_relu(x=ctx.x(0), alpha=float(ctx.attr("alpha", 0.01)), name=ctx.name())]


def _elu(ctx: _Ctx) -> list[Any]:
    _float_only(ctx)
    return [ctx.mb.elu(x=ctx.x(0), alpha=float(ctx.attr("alpha", 1.0)), name=ctx.name())]


def _hard_sigmoid(ctx: _Ctx) -> list[Any]:
    _float_only(ctx)
    return [ctx.mb.sigmoid_hard(x=ctx.x(0), alpha=float(ctx.attr("alpha", 0.2)), beta=float(ctx.attr("beta", 0.5)), name=ctx.name())]


def _hard_swish(ctx: _Ctx) -> list[Any]:
    _float_only(ctx)
    gate = ctx.mb.sigmoid_hard(x=ctx.x(0), alpha=1.0 / 6.0, beta=0.5, name=ctx.name("_gate"))
    return [ctx.mb.mul(x=ctx.x(0), y=gate, name=ctx.name())]


def _softplus(ctx: _Ctx) -> list[Any]:
    _float_only(ctx)
    return [ctx.mb.softplus(x=ctx.x(0), name=ctx.name())]


def _gelu(ctx: _Ctx) -> list[Any]:
    _float_only(ctx)
    approximate = ctx.attr("approximate", "none")
    mode = {"none": "EXACT", "tanh": "TANH_APPROXIMATION"}.get(approximate)
    if mode is None:
        raise ctx.decline(f"approximate={approximate!r}")
    return [ctx.mb.gelu(x=ctx.x(0), mode=mode, name=ctx.name())]


def _clip(ctx: _Ctx) -> list[Any]:
    _float_only(ctx)
    if ctx.node.opset < 11:
        low, high = ctx.attr("min", -np.inf), ctx.attr("max", np.inf)
    else:
        low = float(ctx.const(1, "min")) if ctx.has(1) else -np.inf
        high = float(ctx.const(2, "max")) if ctx.has(2) else np.inf
    if low > high:
        raise ctx.decline(f"min {low} > max {high}")
    finite = float(np.finfo(ctx.dtype(0)).max)
    low, high = max(low, -finite), min(high, finite)
    if low == 0.0 and high == finite:
        return [ctx.mb.relu(x=ctx.x(0), name=ctx.name())]
    return [ctx.mb.clip(x=ctx.x(0), alpha=np.float32(low), beta=np.float32(high), name=ctx.name())]


def _softmax(ctx: _Ctx) -> list[Any]:
    _float_only(ctx)
    rank = ctx.rank(0)
    axis = _axis(ctx.attr("axis", -1 if ctx.node.opset >= 13 else 1), rank, ctx)
    if ctx.node.opset < 13 and axis != rank - 1:
        raise ctx.decline(f"opset {ctx.node.opset} Softmax flattens from axis {axis}; only the last axis is supported")
    return [ctx.mb.softmax(x=ctx.x(0), axis=axis, name=ctx.name())]


def _layer_norm(ctx: _Ctx) -> list[Any]:
    _float_only(ctx)
    if len([n for n in ctx.node.outputs if n]) > 1:
        raise ctx.decline("the Mean and InvStdDev outputs are not supported")
    rank = ctx.rank(0)
    axis = _axis(ctx.attr("axis", -1), rank, ctx)
    dtype = ctx.dtype(0)
    gamma = ctx.const(1, "scale").astype(dtype)
    beta = ctx.const(2, "bias").astype(dtype) if ctx.has(2) else np.zeros_like(gamma)
    normalized = ctx.shape(0)[axis:]
    if not _static(normalized):
        raise ctx.decline(f"the normalized dims {normalized} must be static")
    gamma = np.broadcast_to(gamma, normalized).copy()
    beta = np.broadcast_to(beta, normalized).copy()
    return [ctx.mb.layer_norm(x=ctx.x(0), axes=list(range(axis, rank)), gamma=gamma, beta=beta,
                              epsilon=np.array(ctx.attr("epsilon", 1e-5), dtype), name=ctx.name())]


def _batch_norm(ctx: _Ctx) -> list[Any]:
    _float_only(ctx)
    if ctx.attr("training_mode", 0) or len([n for n in ctx.node.outputs if n]) > 1:
        raise ctx.decline("training mode (running mean/var outputs) is not supported")
    if ctx.rank(0) not in (3, 4, 5):
        raise ctx.decline(f"input rank {ctx.rank(0)}; Core ML's batch_norm takes rank 3 to 5")
    dtype = ctx.dtype(0)
    scale, bias, mean, var = (ctx.const(k, w).astype(dtype) for k, w in
                              ((1, "scale"), (2, "B"), (3, "input_mean"), (4, "input_var")))
    return [ctx.mb.batch_norm(x=ctx.x(0), mean=mean, variance=var, gamma=scale, beta=bias,
                              epsilon=np.array(ctx.attr("epsilon", 1e-5), dtype), name=ctx.name())]


def _spatial(ctx: _Ctx, spatial: int, kernel: Sequence[int], strides: Sequence[int],
             dilations: Sequence[int]) -> tuple[str, list[int]]:
    """MIL (pad_type, pad) for the node's auto_pad and pads, pads as (begin, end) per axis."""
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if auto_pad == "VALID":
        return "valid", [0] * (2 * spatial)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        sizes = ctx.shape(0)[2:]
        if not _static(sizes):
            raise ctx.decline(f"auto_pad={auto_pad} with dynamic spatial sizes {sizes}")
        pad = []
        for size, k, s, d in zip(sizes, kernel, strides, dilations):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small, big = total // 2, total - total // 2
            pad += [small, big] if auto_pad == "SAME_UPPER" else [big, small]
        return "custom", pad
    if auto_pad != "NOTSET":
        raise ctx.decline(f"auto_pad={auto_pad!r}")
    pads = list(ctx.attr("pads", [0] * (2 * spatial)))
    if len(pads) != 2 * spatial:
        raise ctx.decline(f"pads {pads} do not match {spatial} spatial dims")
    return "custom", [p for axis in range(spatial) for p in (pads[axis], pads[spatial + axis])]


def _conv(ctx: _Ctx) -> list[Any]:
    _float_only(ctx)
    rank = ctx.rank(0)
    if rank not in (3, 4, 5):
        raise ctx.decline(f"input rank {rank}; Core ML convolves 1 to 3 spatial dims")
    spatial = rank - 2
    weight = ctx.const(1, "weight W").astype(ctx.dtype(0))
    kernel = list(ctx.attr("kernel_shape", weight.shape[2:]))
    strides = list(ctx.attr("strides", [1] * spatial))
    dilations = list(ctx.attr("dilations", [1] * spatial))
    pad_type, pad = _spatial(ctx, spatial, kernel, strides, dilations)
    kwargs: dict[str, Any] = {}
    if ctx.has(2):
        kwargs["bias"] = ctx.const(2, "bias B").astype(ctx.dtype(0))
    return [ctx.mb.conv(x=ctx.x(0), weight=weight, strides=strides, pad_type=pad_type, pad=pad,
                        dilations=dilations, groups=int(ctx.attr("group", 1)), name=ctx.name(), **kwargs)]


def _conv_transpose(ctx: _Ctx) -> list[Any]:
    _float_only(ctx)
    rank = ctx.rank(0)
    if rank not in (3, 4, 5):
        raise ctx.decline(f"input rank {rank}; Core ML convolves 1 to 3 spatial dims")
    spatial = rank - 2
    for name in ("output_shape",):
        if ctx.attr(name) is not None:
            raise ctx.decline(f"the {name} attribute is not supported (give pads)")
    if any(ctx.attr("output_padding", [0] * spatial)):
        raise ctx.decline(f"output_padding {ctx.attr('output_padding')} is not supported")
    if ctx.attr("auto_pad", "NOTSET") != "NOTSET":
        raise ctx.decline(f"auto_pad={ctx.attr('auto_pad')!r} is not supported (give pads)")
    # ONNX's ConvTranspose weight is [C_in, C_out/groups, *K], which is MIL's layout too
    weight = ctx.const(1, "weight W").astype(ctx.dtype(0))
    strides = list(ctx.attr("strides", [1] * spatial))
    dilations = list(ctx.attr("dilations", [1] * spatial))
    _, pad = _spatial(ctx, spatial, weight.shape[2:], strides, dilations)
    kwargs: dict[str, Any] = {}
    if ctx.has(2):
        kwargs["bias"] = ctx.const(2, "bias B").astype(ctx.dtype(0))
    return [ctx.mb.conv_transpose(x=ctx.x(0), weight=weight, strides=strides, pad_type="custom", pad=pad,
                                  dilations=dilations, groups=int(ctx.attr("group", 1)), name=ctx.name(), **kwargs)]


def _pool(ctx: _Ctx) -> list[Any]:
    _float_only(ctx)
    op = ctx.node.op_type
    rank = ctx.rank(0)
    if rank not in (3, 4, 5):
        raise ctx.decline(f"input rank {rank}; Core ML pools 1 to 3 spatial dims")
    if len([n for n in ctx.node.outputs if n]) > 1:
        raise ctx.decline("the Indices output is not supported")
    if ctx.attr("ceil_mode", 0):
        raise ctx.decline("ceil_mode=1 is not supported (ONNX and Core ML place the last window differently)")
    if ctx.attr("storage_order", 0):
        raise ctx.decline("storage_order=1 is not supported")
    spatial = rank - 2
    kernel = list(ctx.attr("kernel_shape"))
    strides = list(ctx.attr("strides", [1] * spatial))
    if any(d != 1 for d in ctx.attr("dilations", [1] * spatial)):
        raise ctx.decline(f"dilations {ctx.attr('dilations')} are not supported")
    pad_type, pad = _spatial(ctx, spatial, kernel, strides, [1] * spatial)
    if op == "MaxPool":
        return [ctx.mb.max_pool(x=ctx.x(0), kernel_sizes=kernel, strides=strides, pad_type=pad_type, pad=pad,
                                name=ctx.name())]
    return [ctx.mb.avg_pool(x=ctx.x(0), kernel_sizes=kernel, strides=strides, pad_type=pad_type, pad=pad,
                            exclude_padding_from_average=not ctx.attr("count_include_pad", 0), name=ctx.name())]


def _global_pool(ctx: _Ctx) -> list[Any]:
    _float_only(ctx)
    axes = list(range(2, ctx.rank(0)))
    op = "reduce_mean" if ctx.node.op_type == "GlobalAveragePool" else "reduce_max"
    return [getattr(ctx.mb, op)(x=ctx.x(0), axes=axes, keep_dims=True, name=ctx.name())]


def _gemm(ctx: _Ctx) -> list[Any]:
    _float_only(ctx)
    dtype = ctx.dtype(0)
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    a = ctx.x(0)
    if ctx.attr("transA", 0):
        a = ctx.mb.transpose(x=a, perm=[1, 0], name=ctx.name("_a_t"))
    c = ctx.const(2, "C") if ctx.has(2) and isinstance(ctx.env[ctx.node.inputs[2]], np.ndarray) else None
    env_b = ctx.env[ctx.node.inputs[1]]
    if isinstance(env_b, np.ndarray):
        # linear: x @ weight.T + bias, weight [N, K]; alpha and beta folded into the constants
        weight = (env_b if ctx.attr("transB", 0) else env_b.T).astype(np.float64) * alpha
        n = weight.shape[0]
        bias = np.zeros(n)
        rest = None
        if c is not None and c.size in (1, n) and c.ndim <= 1:
            bias = np.broadcast_to(c.astype(np.float64).reshape(-1) * beta, (n,))
        elif ctx.has(2):
            rest = ctx.x(2)
        y = ctx.mb.linear(x=a, weight=weight.astype(dtype), bias=np.ascontiguousarray(bias, dtype=dtype),
                          name=ctx.name() if rest is None else ctx.name("_linear"))
    else:
        y = ctx.mb.matmul(x=a, y=ctx.x(1), transpose_y=bool(ctx.attr("transB", 0)), name=ctx.name("_matmul"))
        if alpha != 1.0:
            y = ctx.mb.mul(x=y, y=np.array(alpha, dtype), name=ctx.name("_alpha"))
        rest = ctx.x(2) if ctx.has(2) else None
        if rest is None:
            y = ctx.mb.identity(x=y, name=ctx.name())
    if rest is not None:
        if beta != 1.0:
            rest = ctx.mb.mul(x=rest, y=np.array(beta, dtype), name=ctx.name("_beta"))
        y = ctx.mb.add(x=y, y=rest, name=ctx.name())
    return [y]


def _matmul(ctx: _Ctx) -> list[Any]:
    _float_only(ctx)
    if ctx.rank(0) == 0 or ctx.rank(1) == 0:
        raise ctx.decline("0-d inputs")
    return [ctx.mb.matmul(x=ctx.x(0), y=ctx.x(1), name=ctx.name())]


def _reshape_target(ctx: _Ctx, shape: np.ndarray, allowzero: bool) -> list[int]:
    """ONNX's target shape with its 0s (copy the input's dim) resolved; -1 is kept."""
    dims = ctx.shape(0)
    target = [int(d) for d in shape.reshape(-1)]
    if 0 in target and not allowzero:
        for k, d in enumerate(target):
            if d == 0:
                if k >= len(dims) or not isinstance(dims[k], (int, np.integer)):
                    raise ctx.decline(f"shape {target}: 0 copies input dim {k}, which is not static")
                target[k] = int(dims[k])
    if target.count(-1) > 1:
        raise ctx.decline(f"shape {target} has more than one -1")
    return target


def _reshape(ctx: _Ctx) -> list[Any]:
    value = ctx.env[ctx.node.inputs[1]]
    allowzero = bool(ctx.attr("allowzero", 0))
    if isinstance(value, np.ndarray) or getattr(value, "val", None) is not None:
        target = _reshape_target(ctx, ctx.const(1, "shape"), allowzero)
        return [ctx.mb.reshape(x=ctx.x(0), shape=np.array(target, np.int32), name=ctx.name())]
    # a shape computed at run time: ONNX's 0 means "copy the input's dim", which MIL's reshape
    # does not know, so the 0s are replaced with the input's dims in the program
    if allowzero:
        return [ctx.mb.reshape(x=ctx.x(0), shape=ctx.x(1), name=ctx.name())]
    length = ctx.shape(1)
    if not _static(length):
        raise ctx.decline("a computed shape of unknown length")
    n, rank = int(length[0]), ctx.rank(0)
    shape = ctx.x(1)
    own = ctx.mb.shape(x=ctx.x(0), name=ctx.name("_in_shape"))
    if n < rank:
        own = ctx.mb.slice_by_index(x=own, begin=[0], end=[n], name=ctx.name("_in_dims"))
    elif n > rank:  # a 0 past the input's rank is invalid ONNX; it stays 0 (and fails) here
        own = ctx.mb.concat(values=[own, np.zeros(n - rank, np.int32)], axis=0, name=ctx.name("_in_dims"))
    zero = ctx.mb.equal(x=shape, y=np.int32(0), name=ctx.name("_is_zero"))
    target = ctx.mb.select(cond=zero, a=own, b=shape, name=ctx.name("_target"))
    return [ctx.mb.reshape(x=ctx.x(0), shape=target, name=ctx.name())]


def _flatten(ctx: _Ctx) -> list[Any]:
    dims = ctx.shape(0)
    axis = ctx.attr("axis", 1)
    axis = axis + len(dims) if axis < 0 else axis
    before, after = dims[:axis], dims[axis:]
    if _static(before):
        target = [int(np.prod(before, dtype=np.int64)), -1]
    elif _static(after):
        target = [-1, int(np.prod(after, dtype=np.int64))]
    else:
        raise ctx.decline(f"input shape {dims}: dynamic dims on both sides of axis {axis}")
    return [ctx.mb.reshape(x=ctx.x(0), shape=np.array(target, np.int32), name=ctx.name())]


def _transpose(ctx: _Ctx) -> list[Any]:
    rank = ctx.rank(0)
    perm = list(ctx.attr("perm", list(range(rank))[::-1]))
    return [ctx.mb.transpose(x=ctx.x(0), perm=perm, name=ctx.name())]


def _concat(ctx: _Ctx) -> list[Any]:
    names = [n for n in ctx.node.inputs if n]
    rank = ctx.rank(0)
    axis = _axis(ctx.attr("axis"), rank, ctx)
    values = [ctx.x(k) for k in range(len(names))]
    if len(values) == 1:
        return [ctx.mb.identity(x=values[0], name=ctx.name())]
    return [ctx.mb.concat(values=values, axis=axis, name=ctx.name())]


def _axes_of(ctx: _Ctx, k: int, attr: str = "axes") -> list[int] | None:
    """The node's axes: an attribute before opset 13 (18 for reductions), an input since."""
    if ctx.attr(attr) is not None:
        return [int(a) for a in ctx.attr(attr)]
    if ctx.has(k):
        return [int(a) for a in ctx.const(k, "axes").reshape(-1)]
    return None


def _unsqueeze(ctx: _Ctx) -> list[Any]:
    axes = _axes_of(ctx, 1)
    if axes is None:
        raise ctx.decline("no axes")
    out_rank = ctx.rank(0) + len(axes)
    axes = sorted(a % out_rank for a in axes)
    return [ctx.mb.expand_dims(x=ctx.x(0), axes=axes, name=ctx.name())]


def _squeeze(ctx: _Ctx) -> list[Any]:
    axes = _axes_of(ctx, 1)
    rank = ctx.rank(0)
    if axes is None:
        dims = ctx.shape(0)
        if not _static(dims):
            raise ctx.decline(f"no axes and dynamic shape {dims}")
        axes = [k for k, d in enumerate(dims) if d == 1]
    axes = sorted(a % rank for a in axes)
    if len(axes) == rank:
        raise ctx.decline("squeezing to a 0-d tensor")
    return [ctx.mb.squeeze(x=ctx.x(0), axes=axes, name=ctx.name())]


def _slice(ctx: _Ctx) -> list[Any]:
    dims = ctx.shape(0)
    rank = len(dims)
    if ctx.node.opset < 10:
        starts, ends = list(ctx.attr("starts")), list(ctx.attr("ends"))
        axes = list(ctx.attr("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts = [int(v) for v in ctx.const(1, "starts").reshape(-1)]
        ends = [int(v) for v in ctx.const(2, "ends").reshape(-1)]
        axes = [int(v) for v in ctx.const(3, "axes").reshape(-1)] if ctx.has(3) else list(range(len(starts)))
        steps = [int(v) for v in ctx.const(4, "steps").reshape(-1)] if ctx.has(4) else [1] * len(starts)
    begin, end, stride = [0] * rank, [0] * rank, [1] * rank
    begin_mask, end_mask = [True] * rank, [True] * rank
    for start, stop, axis, step in zip(starts, ends, axes, steps):
        axis = _axis(axis, rank, ctx)
        size = dims[axis]
        if not isinstance(size, (int, np.integer)):
            raise ctx.decline(f"slicing dynamic dim {axis}")
        if step == 0:
            raise ctx.decline("step 0")
        # ONNX's clamping rules are Python's; slice.indices gives the exact first index and
        # a stop that may be -1 (before index 0, for negative steps): then the end is masked
        b, e, s = slice(start, stop, step).indices(int(size))
        begin[axis], stride[axis], begin_mask[axis] = b, s, False
        if e < 0:
            end[axis], end_mask[axis] = 0, True
        else:
            end[axis], end_mask[axis] = e, False
        if len(range(b, e, s)) == 0:
            raise ctx.decline(f"an empty slice of axis {axis}")
    return [ctx.mb.slice_by_index(x=ctx.x(0), begin=np.array(begin, np.int32), end=np.array(end, np.int32),
                                  stride=np.array(stride, np.int32), begin_mask=begin_mask, end_mask=end_mask,
                                  name=ctx.name())]


def _gather(ctx: _Ctx) -> list[Any]:
    rank = ctx.rank(0)
    axis = _axis(ctx.attr("axis", 0), rank, ctx)
    if ctx.dtype(0) == np.bool_:
        raise ctx.decline("bool data")
    value = ctx.env[ctx.node.inputs[1]]
    if isinstance(value, np.ndarray):
        size = ctx.shape(0)[axis]
        if isinstance(size, (int, np.integer)) and value.size and (value.min() < -size or value.max() >= size):
            raise ctx.decline(f"constant indices out of range for dim {size}")
    # MIL's gather takes negative indices (counted from the end) like ONNX
    return [ctx.mb.gather(x=ctx.x(0), indices=ctx.x(1), axis=axis, name=ctx.name())]


def _split(ctx: _Ctx) -> list[Any]:
    dims = ctx.shape(0)
    axis = _axis(ctx.attr("axis", 0), len(dims), ctx)
    count = len(ctx.node.outputs)
    sizes = None
    if ctx.attr("split") is not None:
        sizes = [int(v) for v in ctx.attr("split")]
    elif ctx.has(1):
        sizes = [int(v) for v in ctx.const(1, "split").reshape(-1)]
    size = dims[axis]
    if sizes is None:
        if not isinstance(size, (int, np.integer)):
            raise ctx.decline(f"splitting dynamic dim {axis} without sizes")
        chunk = -(-int(size) // count)  # ONNX: the last chunk may be smaller (opset 18)
        sizes = [chunk] * (count - 1) + [int(size) - chunk * (count - 1)]
        if sizes[-1] <= 0:
            raise ctx.decline(f"dim {size} cannot be split into {count} outputs")
    if any(s <= 0 for s in sizes):
        raise ctx.decline(f"split sizes {sizes}: Core ML has no empty outputs")
    outs = ctx.mb.split(x=ctx.x(0), split_sizes=np.array(sizes, np.int32), axis=axis, name=ctx.name())
    return list(outs) if isinstance(outs, (list, tuple)) else [outs]


def _reduce(ctx: _Ctx) -> list[Any]:
    op = ctx.node.op_type
    if op != "ReduceSum" and op != "ReduceMax" and op != "ReduceMin":
        _float_only(ctx)
    if ctx.dtype(0) == np.bool_:
        raise ctx.decline("bool input")
    rank = ctx.rank(0)
    axes = _axes_of(ctx, 1)
    keep = bool(ctx.attr("keepdims", 1))
    if axes is None or axes == []:
        if ctx.attr("noop_with_empty_axes", 0):
            return [ctx.mb.identity(x=ctx.x(0), name=ctx.name())]
        axes = list(range(rank))
    axes = sorted({a % rank for a in axes})
    if not keep and len(axes) == rank:
        raise ctx.decline("reducing every axis without keepdims (a 0-d result)")
    return [getattr(ctx.mb, _REDUCE[op])(x=ctx.x(0), axes=axes, keep_dims=keep, name=ctx.name())]


_CAST_TO = {1: "fp32", 10: "fp16", 6: "int32", 7: "int32", 9: "bool"}


def _cast(ctx: _Ctx) -> list[Any]:
    to = int(ctx.attr("to"))
    if to not in _CAST_TO:
        raise ctx.decline(f"to={to}: Core ML casts to float32, float16, int32, int64 (as int32) or bool only")
    src = ctx.dtype(0)
    if src in FLOAT_TYPES and _CAST_TO[to] in ("int32", "bool"):
        raise ctx.decline(f"float to {'bool' if to == 9 else 'integer'}: Core ML's rounding is not ONNX's truncation")
    if src.kind in "iu" and _CAST_TO[to] == "bool":
        raise ctx.decline("integer to bool")
    return [ctx.mb.cast(x=ctx.x(0), dtype=_CAST_TO[to], name=ctx.name())]


def _shape(ctx: _Ctx) -> list[Any]:
    rank = ctx.rank(0)
    start, end = ctx.attr("start", 0), ctx.attr("end", rank)
    start, end = max(0, min(rank, start % rank if start < 0 else start)), max(0, min(rank, end + rank if end < 0 else end))
    if end <= start:
        raise ctx.decline("an empty shape slice")
    shape = ctx.mb.shape(x=ctx.x(0), name=ctx.name("_full") if (start, end) != (0, rank) else ctx.name())
    if (start, end) == (0, rank):
        return [shape]
    return [ctx.mb.slice_by_index(x=shape, begin=[start], end=[end], name=ctx.name())]


def _dropout(ctx: _Ctx) -> list[Any]:
    if len([n for n in ctx.node.outputs if n]) > 1:
        raise ctx.decline("the mask output is not supported")
    if ctx.has(2) and bool(ctx.const(2, "training_mode")):
        raise ctx.decline("training_mode")
    return [ctx.mb.identity(x=ctx.x(0), name=ctx.name())]


def _resize(ctx: _Ctx) -> list[Any]:
    _float_only(ctx)
    if ctx.node.opset < 11:
        raise ctx.decline(f"opset {ctx.node.opset} Resize")
    dims = ctx.shape(0)
    if len(dims) != 4 or not _static(dims[2:]):
        raise ctx.decline(f"input shape {dims}: a 4-D NCHW input with static H and W is required")
    for name, default in (("antialias", 0), ("exclude_outside", 0)):
        if ctx.attr(name, default):
            raise ctx.decline(f"{name}=1")
    if ctx.attr("keep_aspect_ratio_policy", "stretch") != "stretch" or ctx.attr("axes") is not None:
        raise ctx.decline("keep_aspect_ratio_policy or axes")
    scales = ctx.const(2, "scales").astype(np.float64) if ctx.has(2) and ctx.const(2, "scales").size else None
    if scales is None:
        sizes = ctx.const(3, "sizes").astype(np.float64)
        scales = sizes / np.array([1 if not isinstance(d, (int, np.integer)) else d for d in dims], np.float64)
        scales[:2] = sizes[:2] / np.array([d if isinstance(d, (int, np.integer)) else sizes[k] for k, d in enumerate(dims[:2])])
    if len(scales) != 4 or scales[0] != 1 or scales[1] != 1:
        raise ctx.decline(f"scales {list(scales)}: only H and W may be scaled")
    sh, sw = float(scales[2]), float(scales[3])
    if sh != int(sh) or sw != int(sw) or sh < 1 or sw < 1:
        raise ctx.decline(f"scales {sh}, {sw}: integer upsampling factors only")
    mode = ctx.attr("mode", "nearest")
    transform = ctx.attr("coordinate_transformation_mode", "half_pixel")
    if mode == "nearest":
        nearest = ctx.attr("nearest_mode", "round_prefer_floor")
        # with an integer factor, asymmetric+floor picks input i // s, which is what
        # upsample_nearest_neighbor does; half_pixel + round_prefer_floor does too
        ok = (transform == "asymmetric" and nearest == "floor") or (
            transform in ("half_pixel", "pytorch_half_pixel") and nearest == "round_prefer_floor")
        if not ok:
            raise ctx.decline(f"nearest with coordinate_transformation_mode={transform!r}, nearest_mode={nearest!r}")
        return [ctx.mb.upsample_nearest_neighbor(x=ctx.x(0), scale_factor_height=int(sh), scale_factor_width=int(sw),
                                                 name=ctx.name())]
    if mode == "linear":
        if transform not in ("half_pixel", "pytorch_half_pixel"):
            raise ctx.decline(f"linear with coordinate_transformation_mode={transform!r}")
        return [ctx.mb.upsample_bilinear(x=ctx.x(0), scale_factor_height=sh, scale_factor_width=sw,
                                         align_corners=False, half_pixel_centers=True, name=ctx.name())]
    raise ctx.decline(f"mode={mode!r}")


def _constant(ctx: _Ctx) -> list[Any]:
    value = ctx.graph.value(ctx.node.outputs[0]).const_value
    if value is None:
        raise ctx.decline("a Constant whose value is not a tensor")
    return [np.asarray(value)]


LOWERINGS: dict[str, Callable[[_Ctx], list[Any]]] = {
    **{op: _unary for op in _UNARY}, **{op: _binary for op in _BINARY}, **{op: _compare for op in _COMPARE},
    **{op: _reduce for op in _REDUCE},
    "Log": _log, "Neg": _neg, "Reciprocal": _reciprocal, "Where": _where, "Not": _not,
    "LeakyRelu": _leaky_relu, "Elu": _elu, "HardSigmoid": _hard_sigmoid, "HardSwish": _hard_swish,
    "Softplus": _softplus, "Gelu": _gelu, "Clip": _clip, "Softmax": _softmax,
    "LayerNormalization": _layer_norm, "BatchNormalization": _batch_norm,
    "Conv": _conv, "ConvTranspose": _conv_transpose, "MaxPool": _pool, "AveragePool": _pool,
    "GlobalAveragePool": _global_pool, "GlobalMaxPool": _global_pool,
    "Gemm": _gemm, "MatMul": _matmul, "Reshape": _reshape, "Flatten": _flatten, "Transpose": _transpose,
    "Concat": _concat, "Unsqueeze": _unsqueeze, "Squeeze": _squeeze, "Slice": _slice, "Gather": _gather,
    "Split": _split, "Cast": _cast, "Shape": _shape, "Dropout": _dropout, "Resize": _resize,
    "Constant": _constant,
}


# ------------------------------------------------------------------------------ programs
@dataclass(frozen=True)
class InputSpec:
    """A program input: the ONNX value, its dtype and dims (int, or a str naming a free dim)."""

    name: str
    dtype: np.dtype
    dims: tuple[int | str, ...]


@dataclass
class Lowered:
    """A lowered group: the MIL program, and which ONNX outputs it returns or are constants."""

    program: Any
    inputs: list[InputSpec]
    program_outputs: list[str]  # ONNX output names, in the program's output order
    constants: dict[str, np.ndarray]  # ONNX outputs known at build time (not in the program)


def _spec_dims(graph: GraphView, name: str, overrides: dict[str, int]) -> tuple[int | str, ...]:
    value = graph.value(name)
    if value.shape is None:
        raise Decline(f"input {name!r} has no known shape (Core ML needs at least its rank)")
    dims: list[int | str] = []
    for k, d in enumerate(value.shape):
        if isinstance(d, int):
            dims.append(d)
        elif isinstance(d, str) and d in overrides:
            dims.append(int(overrides[d]))
        else:
            dims.append(d if isinstance(d, str) and d else f"{name}_dim{k}")
    return tuple(dims)


def input_specs(graph: GraphView, names: Sequence[str], overrides: dict[str, int] | None = None) -> list[InputSpec]:
    specs = []
    for name in names:
        dtype = graph.value(name).dtype
        if dtype is None or dtype not in VALUE_TYPES:
            raise Decline(f"input {name!r} is {graph.value(name).type}; Core ML takes float32, float16, int32, int64 and bool")
        specs.append(InputSpec(name, dtype, _spec_dims(graph, name, overrides or {})))
    return specs


def lower(graph: GraphView, indices: Sequence[int], inputs: Sequence[str], outputs: Sequence[str],
          overrides: dict[str, int] | None = None, trial: bool = False) -> Lowered:
    """The group's nodes as one MIL program. Raises ``Decline`` naming the node that fails.
    ``trial``: only to see whether a node lowers (capability), a program is not needed."""
    ct = _ct.load()
    mil = ct.converters.mil
    mb = mil.Builder
    # group inputs known at build time (values of Constant nodes outside the group) are
    # constants in the program, not package inputs
    specs = input_specs(graph, [n for n in inputs if graph.value(n).const_value is None], overrides)
    symbols: dict[str, Any] = {}

    def dim(d: int | str) -> Any:
        if isinstance(d, int):
            return d
        if d not in symbols:
            symbols[d] = mil.mil.get_new_symbol()
        return symbols[d]

    # Core ML's inputs and outputs have rank >= 1: a 0-d value travels as shape (1,) and is
    # reshaped inside the program (the kernel reshapes back)
    tensor_specs = [mb.TensorSpec(shape=tuple(dim(d) for d in s.dims) or (1,), dtype=mil_dtype(s.dtype))
                    for s in specs]
    result: dict[str, Any] = {}

    def body(*args: Any) -> Any:
        env: dict[str, Any] = {}
        for spec, arg in zip(specs, args):
            env[spec.name] = arg if spec.dims else mb.reshape(x=arg, shape=np.zeros(0, np.int32), name=f"{safe_name(spec.name)}_0d")
        for i in sorted(indices):
            node = graph.nodes[i]
            for name in node.inputs:
                if name and name not in env:
                    const = graph.value(name).const_value
                    if const is None:
                        raise Decline(f"{node.op_type} {node.name!r}: input {name!r} is neither a group input nor a constant")
                    env[name] = np.asarray(const)
            if node.domain not in ("", "ai.onnx"):
                raise Decline(f"{node.qualified_op}: domain {node.domain!r} is not lowered")
            lowering = LOWERINGS.get(node.op_type)
            if lowering is None:
                raise Decline(f"{node.op_type} is not lowered to Core ML")
            try:
                values = lowering(_Ctx(graph, mb, env, node))
            except Decline:
                raise
            except Exception as exc:  # coremltools' own type checks reject the node
                raise Decline(f"{node.op_type}: coremltools rejected it: {type(exc).__name__}: {_first_line(exc)}") from exc
            for name, value in zip(node.outputs, values):
                if name:
                    env[name] = value
        returned = []
        for k, name in enumerate(outputs):
            value = env[name]
            if isinstance(value, np.ndarray) or getattr(value, "val", None) is not None:
                result.setdefault("constants", {})[name] = np.asarray(value if isinstance(value, np.ndarray) else value.val)
                continue
            if len(value.shape) == 0:
                returned.append(mb.reshape(x=value, shape=np.array([1], np.int32), name=f"out_{k}"))
            else:
                returned.append(mb.identity(x=value, name=f"out_{k}"))
            result.setdefault("names", []).append(name)
        if not returned:
            if not args:
                if trial:  # a node of constants alone: it lowers, and belongs to a group with more
                    return (mb.const(val=np.zeros(1, np.float32), name="out_unused"),)
                raise Decline("every output is known at build time: nothing for Core ML to compute")
            # every output is known at build time: a trivial program keeps the package valid
            returned.append(mb.identity(x=args[0], name="out_unused"))
        return tuple(returned)

    names = [f"in_{k}" for k in range(len(specs))]
    opset = getattr(ct.target, TARGET_NAME)
    # what mb.program does, with input names of our own (it reads them from a def's code)
    with mil.mil.Function(dict(zip(names, tensor_specs)), opset) as function:
        function.set_outputs(list(body(*[function.inputs[n] for n in names])))
    program = mil.mil.Program()
    program.add_function("main", function)
    return Lowered(program, specs, list(result.get("names", [])), dict(result.get("constants", {})))


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""
