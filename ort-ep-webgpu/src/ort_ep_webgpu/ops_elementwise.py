"""Elementwise kernels: unary math and activations, broadcasting binary ops, comparisons,
logic, variadic Sum/Max/Min/Mean, Where, Cast, Clip, BatchNormalization (inference), Expand.

Float math runs in f32 (float16 tensors are widened on load and narrowed on store).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ort_core import Kernel, KernelRequest, NodeView

from . import wgsl
from .registry import Dispatch, Prepared, SessionRuntime, op, shader_kernel
from .runtime import DEVICE_TYPES, GpuTensor

Shape = tuple[int, ...]
# make(dtypes of the present inputs) -> (WGSL expression over x0.., result dtype)
MakeExpr = Callable[[list[np.dtype]], tuple[str, np.dtype]]


def _prod(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def elementwise_source(
    inputs: Sequence[tuple[Shape, np.dtype]], out_shape: Shape, out_dtype: np.dtype, expr: str
) -> tuple[str, list[int]]:
    """One thread per output element: load each input at its broadcast offset, store ``expr``.

    The source depends on the shape class only (rank, and per input: same shape as the output,
    a single element, or broadcast), not on the sizes: those, the element count and the
    broadcast strides are in a uniform buffer, returned as the list of u32 values to put there.
    So a new batch size or sequence length reuses the compiled pipeline.
    """
    rank = len(out_shape)
    values = [_prod(out_shape), *out_shape]

    def u(j: int) -> str:
        return f"u.d[{j // 4}][{j % 4}]"

    lines = []
    indices = []
    general = False
    for shape, _ in inputs:
        padded = (1,) * (rank - len(shape)) + tuple(shape)
        if padded == tuple(out_shape):
            indices.append("i")
        elif _prod(shape) == 1:
            indices.append("0u")
        else:
            general = True
            first = len(values)
            values.extend(wgsl.broadcast_strides(shape, out_shape))
            indices.append(" + ".join(f"c{d} * {u(first + d)}" for d in range(rank)))
    if general:
        lines.append("  var r: u32 = i;")
        for d in range(rank - 1, -1, -1):
            lines.append(f"  let c{d}: u32 = r % {u(1 + d)};")
            if d:
                lines.append(f"  r = r / {u(1 + d)};")
    for k, ((_, dtype), index) in enumerate(zip(inputs, indices)):
        lines.append(f"  let x{k} = {wgsl.load(k, dtype, index)};")
    lines.append(f"  out0[i] = {wgsl.store(expr, out_dtype)};")
    head = wgsl.bindings([wgsl.storage_type(d) for _, d in inputs], [wgsl.storage_type(out_dtype)])
    n_vec4 = -(-len(values) // 4)
    head += (
        f"\nstruct Sizes {{ d: array<vec4<u32>, {n_vec4}> }}\n"
        f"@group(0) @binding({len(inputs) + 1}) var<uniform> u: Sizes;"
    )
    body = "\n".join(lines)
    main = (
        f"@compute @workgroup_size({wgsl.WORKGROUP})\n"
        "fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {\n"
        f"  let i = gid.x + gid.y * nwg.x * {wgsl.WORKGROUP}u;\n"
        f"  if (i >= {u(0)}) {{ return; }}\n"
        f"{body}\n}}\n"
    )
    return f"{head}\n{wgsl.helpers_for(body)}\n{main}", values


def elementwise_kernel(
    rt: SessionRuntime,
    make: MakeExpr,
    *,
    shape_of: Callable[[int, GpuTensor], Shape] | None = None,
    out_shape_of: Callable[[Sequence], Shape] | None = None,
    host_inputs: frozenset[int] = frozenset(),
    make_from_args: Callable[[Sequence], tuple[str, np.dtype]] | None = None,
) -> Kernel:
    """A broadcasting elementwise kernel over the present device inputs. ``make_from_args``
    replaces ``make`` where the expression depends on host inputs (constants of the shader)."""

    def prepare(args: Sequence) -> Prepared:
        present = [k for k, a in enumerate(args) if a is not None and k not in host_inputs]
        shapes = [shape_of(k, args[k]) if shape_of else args[k].shape for k in present]
        out_shape = out_shape_of(args) if out_shape_of else tuple(np.broadcast_shapes(*shapes))
        expr, out_dtype = make_from_args(args) if make_from_args else make([args[k].dtype for k in present])
        source, sizes = elementwise_source(
            [(s, args[k].dtype) for s, k in zip(shapes, present)], out_shape, out_dtype, expr
        )
        n = _prod(out_shape)
        dispatch = Dispatch(rt.gpu.pipeline(source), tuple(present), (0,), wgsl.groups_1d(n), rt.stream.uniform(sizes))
        return Prepared([(out_shape, np.dtype(out_dtype))], [dispatch])

    return shader_kernel(rt, prepare, host_inputs=host_inputs)


def _dtype(node: NodeView, name: str) -> np.dtype | None:
    return node.graph.value(name).dtype if name else None


def _kind_check(table: dict[str, str], positions: tuple[int, ...] = (0,)):
    """Decline nodes whose input kinds have no expression in ``table``."""

    def check(node: NodeView) -> str | None:
        for k in positions:
            if k < len(node.inputs) and node.inputs[k]:
                dtype = _dtype(node, node.inputs[k])
                if dtype is not None and dtype in DEVICE_TYPES and wgsl.kind(dtype) not in table:
                    return f"{node.op_type} on {dtype} has no WebGPU kernel"
        return None

    return check


# --------------------------------------------------------------------------------------------
# unary
# --------------------------------------------------------------------------------------------

UNARY: dict[str, dict[str, str]] = {
    "Relu": {"f": "max(x0, 0.0)", "i": "max(x0, 0)"},
    "Neg": {"f": "-x0", "i": "-x0"},
    "Abs": {"f": "abs(x0)", "i": "abs(x0)"},
    "Sign": {"f": "sign(x0)", "i": "sign(x0)"},
    "Sqrt": {"f": "sqrt(x0)"},
    "Exp": {"f": "exp(x0)"},
    "Log": {"f": "log(x0)"},
    "Tanh": {"f": "tanh_(x0)"},
    "Sigmoid": {"f": "1.0 / (1.0 + exp(-x0))"},
    "Erf": {"f": "erf_(x0)"},
    "Floor": {"f": "floor(x0)"},
    "Ceil": {"f": "ceil(x0)"},
    "Round": {"f": "round(x0)"},
    "Sin": {"f": "sin(x0)"},
    "Cos": {"f": "cos(x0)"},
    "Tan": {"f": "tan(x0)"},
    "Reciprocal": {"f": "1.0 / x0"},
    "Softsign": {"f": "x0 / (1.0 + abs(x0))"},
    "Softplus": {"f": "select(log(1.0 + exp(x0)), x0, x0 > 30.0)"},
    "Not": {"b": "!x0"},
}


def _unary(op_type: str, table: dict[str, str]) -> None:
    @op(op_type, check=_kind_check(table))
    def build(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
        def make(dtypes: list[np.dtype]) -> tuple[str, np.dtype]:
            return table[wgsl.kind(dtypes[0])], dtypes[0]

        return elementwise_kernel(rt, make)


for _op, _table in UNARY.items():
    _unary(_op, _table)


def _activation(op_type: str, expr: Callable[[NodeView], str]) -> None:
    @op(op_type, check=_kind_check({"f": ""}))
    def build(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
        text = expr(node)
        return elementwise_kernel(rt, lambda dtypes: (text, dtypes[0]))


def _a(node: NodeView, name: str, default: float) -> str:
    return wgsl.flit(float(node.attr(name, default)))


_activation("LeakyRelu", lambda n: f"select(x0 * {_a(n, 'alpha', 0.01)}, x0, x0 >= 0.0)")
_activation("Elu", lambda n: f"select({_a(n, 'alpha', 1.0)} * (exp(x0) - 1.0), x0, x0 >= 0.0)")
_activation("Celu", lambda n: f"max(0.0, x0) + min(0.0, {_a(n, 'alpha', 1.0)} * (exp(x0 / {_a(n, 'alpha', 1.0)}) - 1.0))")
_activation("Selu", lambda n: (
    f"{_a(n, 'gamma', 1.05070102214813232421875)} * "
    f"select({_a(n, 'alpha', 1.67326319217681884765625)} * (exp(x0) - 1.0), x0, x0 > 0.0)"
))
_activation("HardSigmoid", lambda n: f"clamp({_a(n, 'alpha', 0.2)} * x0 + {_a(n, 'beta', 0.5)}, 0.0, 1.0)")
_activation("HardSwish", lambda n: "x0 * clamp(x0 / 6.0 + 0.5, 0.0, 1.0)")
_activation("ThresholdedRelu", lambda n: f"select(0.0, x0, x0 > {_a(n, 'alpha', 1.0)})")


# --------------------------------------------------------------------------------------------
# binary, variadic, comparisons, logic
# --------------------------------------------------------------------------------------------

ARITH = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/"}
COMPARE = {"Equal": "==", "Less": "<", "Greater": ">", "LessOrEqual": "<=", "GreaterOrEqual": ">="}
LOGIC = {"And": "&&", "Or": "||", "Xor": "!="}


def _binary(op_type: str, kinds: str, make: MakeExpr) -> None:
    @op(op_type, check=_kind_check(dict.fromkeys(kinds, "")))
    def build(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
        return elementwise_kernel(rt, make)


for _op, _sym in ARITH.items():
    _binary(_op, "fi", lambda dtypes, s=_sym: (f"x0 {s} x1", dtypes[0]))
for _op, _sym in COMPARE.items():
    _binary(_op, "fib" if _op == "Equal" else "fi", lambda dtypes, s=_sym: (f"x0 {s} x1", np.dtype(np.bool_)))
for _op, _sym in LOGIC.items():
    _binary(_op, "b", lambda dtypes, s=_sym: (f"x0 {s} x1", np.dtype(np.bool_)))
_binary("PRelu", "f", lambda dtypes: ("select(x0 * x1, x0, x0 >= 0.0)", dtypes[0]))


def _pow(dtypes: list[np.dtype]) -> tuple[str, np.dtype]:
    base, exponent = wgsl.kind(dtypes[0]), wgsl.kind(dtypes[1])
    if base == "i" and exponent == "i":
        return "ipow_(x0, x1)", dtypes[0]
    expr = f"pow_({wgsl.cast('x0', base, 'f')}, {wgsl.cast('x1', exponent, 'f')})"
    return wgsl.cast(expr, "f", base), dtypes[0]


_binary("Pow", "fi", _pow)


def _variadic(op_type: str, kinds: str, combine: Callable[[str, str], str], finish: Callable[[str, int], str] | None = None) -> None:
    @op(op_type, check=_kind_check(dict.fromkeys(kinds, "")))
    def build(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
        def make(dtypes: list[np.dtype]) -> tuple[str, np.dtype]:
            expr = "x0"
            for k in range(1, len(dtypes)):
                expr = combine(expr, f"x{k}")
            return (finish(expr, len(dtypes)) if finish else expr), dtypes[0]

        return elementwise_kernel(rt, make)


_variadic("Sum", "fi", lambda a, b: f"({a} + {b})")
_variadic("Max", "fi", lambda a, b: f"max({a}, {b})")
_variadic("Min", "fi", lambda a, b: f"min({a}, {b})")
_variadic("Mean", "f", lambda a, b: f"({a} + {b})", lambda e, n: f"{e} / {n}.0")


@op("Where", since=9, check=_kind_check({"f": "", "i": "", "b": ""}, (1,)))
def _where(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    return elementwise_kernel(rt, lambda dtypes: ("select(x2, x1, x0)", dtypes[1]))


def _cast_check(node: NodeView) -> str | None:
    import onnx

    to = int(node.attr("to"))
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(to))
    except (KeyError, TypeError, ValueError):
        dtype = None
    if dtype not in DEVICE_TYPES:
        return f"Cast to {onnx.TensorProto.DataType.Name(to)} has no WebGPU kernel"
    return None


@op("Cast", check=_cast_check)
def _cast(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    import onnx

    to = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(node.attr("to"))))
    if to == np.float16 and not rt.fp16:
        raise ValueError("Cast to float16 needs the shader-f16 feature (option fp16)")
    return elementwise_kernel(rt, lambda dtypes: (wgsl.cast("x0", wgsl.kind(dtypes[0]), wgsl.kind(to)), to))


@op("Clip", check=_kind_check({"f": "", "i": ""}))
def _clip(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    if node.opset < 11:
        lo = wgsl.flit(float(node.attr("min", -3.4028234663852886e38)))
        hi = wgsl.flit(float(node.attr("max", 3.4028234663852886e38)))
        return elementwise_kernel(rt, lambda dtypes: (f"min(max(x0, {lo}), {hi})", dtypes[0]))
    # opset 11+: min and max are (optional) inputs, read on the host as constants of the
    # shader (a new bound compiles a new pipeline; bounds are nearly always constant)
    def make_from_args(args: Sequence) -> tuple[str, np.dtype]:
        x = args[0]
        is_float = wgsl.kind(x.dtype) == "f"
        expr = "x0"
        for k, fn in ((1, "max"), (2, "min")):
            if k < len(args) and args[k] is not None:
                v = np.asarray(args[k]).reshape(()).item()
                expr = f"{fn}({expr}, {wgsl.flit(v) if is_float else int(v)})"
        return expr, x.dtype

    return elementwise_kernel(rt, lambda dtypes: ("x0", dtypes[0]), host_inputs=frozenset({1, 2}),
                              make_from_args=make_from_args)


def _batch_norm_check(node: NodeView) -> str | None:
    if int(node.attr("training_mode", 0)) or sum(1 for o in node.outputs if o) > 1:
        return "BatchNormalization in training mode (extra outputs) has no WebGPU kernel"
    return _kind_check({"f": ""})(node)


@op("BatchNormalization", check=_batch_norm_check)
def _batch_norm(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    eps = wgsl.flit(float(node.attr("epsilon", 1e-5)))
    rank: dict[str, int] = {}

    def shape_of(k: int, t: GpuTensor) -> Shape:
        if k == 0:
            rank["x"] = t.ndim
            return t.shape
        return t.shape + (1,) * (rank["x"] - 2)  # per-channel parameters: (C, 1, ..., 1)

    kernel = elementwise_kernel(
        rt, lambda dtypes: (f"(x0 - x3) / sqrt(x4 + {eps}) * x1 + x2", dtypes[0]), shape_of=shape_of
    )
    if len(node.outputs) == 1:
        return kernel
    n_out = len(node.outputs)
    return Kernel(run=lambda *a: [kernel.run(*a)] + [None] * (n_out - 1))


@op("Expand", since=8)
def _expand(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    def out_shape_of(args: Sequence) -> Shape:
        return tuple(np.broadcast_shapes(args[0].shape, tuple(int(d) for d in args[1])))

    return elementwise_kernel(
        rt, lambda dtypes: ("x0", dtypes[0]), out_shape_of=out_shape_of, host_inputs=frozenset({1})
    )


@op("CastLike", since=15)
def _cast_like(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    to = request.value(node.inputs[1]).dtype
    if to not in rt.supported_dtypes():
        raise ValueError(f"CastLike to {to} has no WebGPU kernel")
    inner = elementwise_kernel(rt, lambda dtypes: (wgsl.cast("x0", wgsl.kind(dtypes[0]), wgsl.kind(to)), to))
    # the second input only names the type; it is not read
    return Kernel(run=lambda x, like: inner.run(x), single_output=True)
