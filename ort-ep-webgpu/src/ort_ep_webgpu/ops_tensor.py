"""Data movement: views (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout) that share
the input's buffer, and copy kernels (Transpose, Gather, Concat, Slice, Split); Shape and Size
read only metadata and return host arrays; Constant uploads its value once."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ort_core import Kernel, KernelRequest, NodeView
from ort_core.hostshapes import constant_value

from . import wgsl
from .registry import Dispatch, Prepared, SessionRuntime, op, shader_kernel
from .runtime import GpuTensor

Shape = tuple[int, ...]
_INT_MAX = 2**62


def _prod(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _axis(a: int, rank: int) -> int:
    if not -rank <= a < rank:
        raise ValueError(f"axis {a} out of range for rank {rank}")
    return a % rank


# --------------------------------------------------------------------------------------------
# views: same buffer, new shape
# --------------------------------------------------------------------------------------------


def reshape_target(shape: np.ndarray, in_shape: Shape, allowzero: bool) -> Shape:
    target = [int(d) for d in np.asarray(shape).ravel()]
    if not allowzero:
        target = [in_shape[k] if d == 0 else d for k, d in enumerate(target)]
    if -1 in target:
        known = _prod([d for d in target if d != -1])
        target[target.index(-1)] = _prod(in_shape) // known if known else 0
    if _prod(target) != _prod(in_shape):
        raise ValueError(f"cannot reshape {list(in_shape)} to {list(np.asarray(shape).ravel())}")
    return tuple(target)


@op("Reshape", since=5)
def _reshape(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    allowzero = bool(node.attr("allowzero", 0))
    return Kernel(
        run=lambda x, shape: x.view(reshape_target(shape, x.shape, allowzero)),
        single_output=True, host_inputs=frozenset({1}),
    )


@op("Flatten")
def _flatten(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    axis = int(node.attr("axis", 1))

    def flatten(x: GpuTensor) -> GpuTensor:
        a = axis + x.ndim if axis < 0 else axis
        return x.view((_prod(x.shape[:a]), _prod(x.shape[a:])))

    return Kernel(run=flatten, single_output=True)


def _squeezed(x: GpuTensor, axes) -> GpuTensor:
    if axes is None or len(axes) == 0:
        return x.view(tuple(d for d in x.shape if d != 1))
    drop = {_axis(int(a), x.ndim) for a in np.asarray(axes).ravel()}
    for a in drop:
        if x.shape[a] != 1:
            raise ValueError(f"cannot squeeze axis {a} of size {x.shape[a]}")
    return x.view(tuple(d for k, d in enumerate(x.shape) if k not in drop))


def _unsqueezed(x: GpuTensor, axes) -> GpuTensor:
    axes = [int(a) for a in np.asarray(axes).ravel()]
    rank = x.ndim + len(axes)
    positions = sorted(_axis(a, rank) for a in axes)
    shape = list(x.shape)
    for p in positions:
        shape.insert(p, 1)
    return x.view(tuple(shape))


@op("Squeeze")
def _squeeze(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    if node.opset < 13:
        axes = node.attr("axes")
        return Kernel(run=lambda x: _squeezed(x, axes), single_output=True)
    return Kernel(run=lambda x, axes=None: _squeezed(x, axes), single_output=True, host_inputs=frozenset({1}))


@op("Unsqueeze")
def _unsqueeze(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    if node.opset < 13:
        axes = node.attr("axes")
        return Kernel(run=lambda x: _unsqueezed(x, axes), single_output=True)
    return Kernel(run=lambda x, axes: _unsqueezed(x, axes), single_output=True, host_inputs=frozenset({1}))


@op("Identity")
def _identity(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    return Kernel(run=lambda x: x, single_output=True)


def _dropout_check(node: NodeView) -> str | None:
    if len(node.outputs) > 1 and node.outputs[1]:
        return "Dropout with the mask output has no WebGPU kernel"
    if len(node.inputs) > 2 and node.inputs[2]:
        value = node.graph.value(node.inputs[2]).const_value
        if value is None or bool(value):
            return "Dropout in training mode has no WebGPU kernel"
    return None


@op("Dropout", check=_dropout_check)
def _dropout(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    n_out = len(node.outputs)
    positions = frozenset(k for k in (1, 2) if k < len(node.inputs))
    if n_out == 1:
        return Kernel(run=lambda x, *rest: x, single_output=True, host_inputs=positions)
    return Kernel(run=lambda x, *rest: [x, None], host_inputs=positions)


# --------------------------------------------------------------------------------------------
# metadata and constants
# --------------------------------------------------------------------------------------------


@op("Shape")
def _shape(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    start = int(node.attr("start", 0))
    end = node.attr("end")
    return Kernel(
        run=lambda x: np.array(x.shape[start:end], dtype=np.int64),
        single_output=True, host_outputs=frozenset({0}), note="reads only the shape; output in host memory",
    )


@op("Size")
def _size(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    return Kernel(
        run=lambda x: np.array(_prod(x.shape), dtype=np.int64),
        single_output=True, host_outputs=frozenset({0}), note="reads only the shape; output in host memory",
    )


@op("Constant")
def _constant(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    value = constant_value(node)
    if value is None:
        raise ValueError(f"Constant {node.name!r}: no tensor value")
    tensor = rt.stream.upload(value)  # once, at session creation
    return Kernel(run=lambda: tensor, single_output=True)


# --------------------------------------------------------------------------------------------
# copy kernels
# --------------------------------------------------------------------------------------------


def _copy_source(dtype: np.dtype, n: int, body: str, extra_inputs: Sequence[str] = ()) -> str:
    head = wgsl.bindings([wgsl.storage_type(dtype), *extra_inputs], [wgsl.storage_type(dtype)])
    return head + "\n" + wgsl.main_1d(n, body)


def _sized_copy_source(dtype: np.dtype, n_values: int, body: str, extra_inputs: Sequence[str] = ()) -> str:
    """A copy kernel whose sizes are in the uniform buffer ``u`` (``u(0)`` = element count), so
    one pipeline serves every shape of a shape class."""
    inputs = [wgsl.storage_type(dtype), *extra_inputs]
    head = wgsl.bindings(inputs, [wgsl.storage_type(dtype)]) + "\n" + wgsl.uniform_decl(len(inputs) + 1, n_values)
    return (
        f"{head}\n@compute @workgroup_size({wgsl.WORKGROUP})\n"
        "fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {\n"
        f"  let i = gid.x + gid.y * nwg.x * {wgsl.WORKGROUP}u;\n"
        f"  if (i >= {wgsl.u(0)}) {{ return; }}\n{body}\n}}\n"
    )


@op("Transpose")
def _transpose(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    perm_attr = node.attr("perm")

    def prepare(args: Sequence) -> Prepared:
        x = args[0]
        rank = x.ndim
        perm = [int(p) for p in perm_attr] if perm_attr is not None else list(range(rank))[::-1]
        out_shape = tuple(x.shape[p] for p in perm)
        st = wgsl.strides(x.shape)
        n = _prod(out_shape)
        values = [n, *out_shape, *[st[p] for p in perm]]
        lines = ["  var r: u32 = i;"]
        for d in range(rank - 1, -1, -1):
            lines.append(f"  let c{d}: u32 = r % {wgsl.u(1 + d)};")
            if d:
                lines.append(f"  r = r / {wgsl.u(1 + d)};")
        index = " + ".join(f"c{d} * {wgsl.u(1 + rank + d)}" for d in range(rank)) or "0u"
        lines.append(f"  out0[i] = in0[{index}];")
        source = _sized_copy_source(x.dtype, len(values), "\n".join(lines))
        dispatch = Dispatch(rt.gpu.pipeline(source), (0,), (0,), wgsl.groups_1d(n), rt.stream.uniform(values))
        return Prepared([(out_shape, x.dtype)], [dispatch])

    return shader_kernel(rt, prepare)


@op("Gather")
def _gather(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    axis_attr = int(node.attr("axis", 0))

    def prepare(args: Sequence) -> Prepared:
        data, indices = args
        axis = _axis(axis_attr, data.ndim)
        dim, inner = data.shape[axis], _prod(data.shape[axis + 1 :])
        count = indices.size
        out_shape = data.shape[:axis] + indices.shape + data.shape[axis + 1 :]
        n = _prod(out_shape)
        values = [n, inner, count, dim, inner * count]
        u = wgsl.u
        body = (
            f"  let inner = i % {u(1)};\n  let j = (i / {u(1)}) % {u(2)};\n  let outer = i / {u(4)};\n"
            f"  let dim = i32({u(3)});\n"
            f"  var k = {wgsl.load(1, indices.dtype, 'j')};\n  if (k < 0) {{ k = k + dim; }}\n"
            "  k = clamp(k, 0, max(dim - 1, 0));\n"
            f"  out0[i] = in0[(outer * {u(3)} + u32(k)) * {u(1)} + inner];"
        )
        source = _sized_copy_source(data.dtype, len(values), body, [wgsl.storage_type(indices.dtype)])
        dispatch = Dispatch(rt.gpu.pipeline(source), (0, 1), (0,), wgsl.groups_1d(n), rt.stream.uniform(values))
        return Prepared([(out_shape, data.dtype)], [dispatch])

    return shader_kernel(rt, prepare)


def _slab_copy(rt: SessionRuntime, dtype: np.dtype, outer: int, part: int, whole: int, inner: int, start: int, k_in: int) -> Dispatch:
    """Copy input (outer, part, inner) into output (outer, whole, inner) at ``start`` (Concat),
    or input slab [start, start+part) of (outer, whole, inner) into output (Split)."""
    n = outer * part * inner
    if k_in >= 0:  # concat: input k_in -> region of the output
        body = (f"  let inner = i % {inner}u;\n  let a = (i / {inner}u) % {part}u;\n  let o = i / {part * inner}u;\n"
                f"  out0[(o * {whole}u + a + {start}u) * {inner}u + inner] = in0[i];")
    else:  # split: region of the input -> output
        body = (f"  let inner = i % {inner}u;\n  let a = (i / {inner}u) % {part}u;\n  let o = i / {part * inner}u;\n"
                f"  out0[i] = in0[(o * {whole}u + a + {start}u) * {inner}u + inner];")
    return Dispatch(rt.gpu.pipeline(_copy_source(dtype, n, body)), (max(k_in, 0),), (0,), wgsl.groups_1d(n))


@op("Concat")
def _concat(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    axis_attr = int(node.attr("axis"))

    def prepare(args: Sequence) -> Prepared:
        first = args[0]
        axis = _axis(axis_attr, first.ndim)
        whole = sum(a.shape[axis] for a in args)
        out_shape = first.shape[:axis] + (whole,) + first.shape[axis + 1 :]
        outer, inner = _prod(first.shape[:axis]), _prod(first.shape[axis + 1 :])
        dispatches, start = [], 0
        for k, a in enumerate(args):
            if a.shape[:axis] != first.shape[:axis] or a.shape[axis + 1 :] != first.shape[axis + 1 :]:
                raise ValueError(f"Concat {node.name!r}: input shapes {[x.shape for x in args]} differ off axis {axis}")
            if a.shape[axis]:
                dispatches.append(_slab_copy(rt, first.dtype, outer, a.shape[axis], whole, inner, start, k))
            start += a.shape[axis]
        return Prepared([(out_shape, first.dtype)], dispatches)

    return shader_kernel(rt, prepare)


def _split_sizes(node: NodeView, dim: int, given, n_out: int) -> list[int]:
    if given is not None and len(given):
        return [int(s) for s in np.asarray(given).ravel()]
    n = int(node.attr("num_outputs") or n_out)
    chunk = -(-dim // n)
    return [min(chunk, max(dim - chunk * k, 0)) for k in range(n)]


@op("Split")
def _split(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    axis_attr = int(node.attr("axis", 0))
    n_out = len(node.outputs)
    from_input = node.opset >= 13
    attr_split = None if from_input else node.attr("split")

    def prepare(args: Sequence) -> Prepared:
        x = args[0]
        axis = _axis(axis_attr, x.ndim)
        sizes = _split_sizes(node, x.shape[axis], args[1] if from_input and len(args) > 1 else attr_split, n_out)
        outer, inner = _prod(x.shape[:axis]), _prod(x.shape[axis + 1 :])
        outputs, dispatches, start = [], [], 0
        for k, size in enumerate(sizes):
            outputs.append((x.shape[:axis] + (size,) + x.shape[axis + 1 :], x.dtype))
            d = _slab_copy(rt, x.dtype, outer, size, x.shape[axis], inner, start, -1)
            dispatches.append(Dispatch(d.pipeline, (0,), (k,), d.groups))
            start += size
        return Prepared(outputs, dispatches)

    return shader_kernel(rt, prepare, n_outputs=n_out, host_inputs=frozenset({1}) if from_input else frozenset())


def slice_params(shape: Shape, starts, ends, axes, steps) -> tuple[list[int], list[int], Shape]:
    """Per-dimension start and step, and the output shape, with ONNX's clamping rules."""
    rank = len(shape)
    start = [0] * rank
    step = [1] * rank
    out = list(shape)
    starts = [int(s) for s in np.asarray(starts).ravel()]
    ends = [int(e) for e in np.asarray(ends).ravel()]
    axes = list(range(len(starts))) if axes is None else [int(a) for a in np.asarray(axes).ravel()]
    steps = [1] * len(starts) if steps is None else [int(s) for s in np.asarray(steps).ravel()]
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = _axis(a, rank)
        dim = shape[a]
        if st == 0:
            raise ValueError("Slice step cannot be 0")
        s = s + dim if s < 0 else s
        e = e + dim if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
            n = max(0, -(-(e - s) // st))
        else:
            s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)
            n = max(0, -(-(s - e) // -st))
        start[a], step[a], out[a] = s, st, n
    return start, step, tuple(out)


@op("Slice", since=1)
def _slice(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    legacy = node.opset < 10

    def prepare(args: Sequence) -> Prepared:
        x = args[0]
        if legacy:
            starts, ends, axes, steps = node.attr("starts"), node.attr("ends"), node.attr("axes"), None
        else:
            starts, ends = args[1], args[2]
            axes = args[3] if len(args) > 3 else None
            steps = args[4] if len(args) > 4 else None
        start, step, out_shape = slice_params(x.shape, starts, ends, axes, steps)
        st = wgsl.strides(x.shape)
        terms = " + ".join(f"({start[d]} + i32(c{d}) * {step[d]}) * {st[d]}" for d in range(x.ndim)) or "0"
        body = f"{wgsl.decompose('i', out_shape, 'c')}\n  out0[i] = in0[u32({terms})];"
        n = _prod(out_shape)
        return Prepared([(out_shape, x.dtype)], [Dispatch(rt.gpu.pipeline(_copy_source(x.dtype, n, body)), (0,), (0,), wgsl.groups_1d(n))])

    return shader_kernel(rt, prepare, host_inputs=frozenset() if legacy else frozenset({1, 2, 3, 4}))


def _literal(value: object, dtype: np.dtype) -> str:
    """A WGSL expression of ``value`` in ``dtype``'s math kind."""
    kind = wgsl.kind(dtype)
    v = np.asarray(value).reshape(-1)
    item = v[0].item() if v.size else 0
    if kind == "f":
        return wgsl.flit(float(item))
    if kind == "b":
        return "true" if item else "false"
    return f"{int(item)}"


@op("ConstantOfShape", since=9)
def _constant_of_shape(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    value = node.attr("value")
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    dtype = fill.dtype
    if dtype not in rt.supported_dtypes():
        raise ValueError(f"ConstantOfShape of {dtype} has no WebGPU kernel")

    def prepare(args: Sequence) -> Prepared:
        shape = tuple(int(d) for d in np.asarray(args[0]).ravel())
        n = _prod(shape)
        source = wgsl.bindings([], [wgsl.storage_type(dtype)]) + "\n" + wgsl.helpers_for("i64_(") * (dtype == np.int64)
        source += "\n" + wgsl.main_1d(n, f"  out0[i] = {wgsl.store(_literal(fill, dtype), dtype)};")
        return Prepared([(shape, dtype)], [Dispatch(rt.gpu.pipeline(source), (), (0,), wgsl.groups_1d(n))])

    return shader_kernel(rt, prepare, host_inputs=frozenset({0}))


def _pad_check(node: NodeView) -> str | None:
    mode = node.attr("mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("constant", "reflect", "edge"):
        return f"Pad mode {mode!r} has no WebGPU kernel"
    return None


@op("Pad", since=2, check=_pad_check)
def _pad(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    mode = node.attr("mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    legacy = node.opset < 11

    def prepare(args: Sequence) -> Prepared:
        x = args[0]
        rank = x.ndim
        if legacy:
            pads_given, value, axes = node.attr("pads"), node.attr("value", 0.0), None
        else:
            pads_given = args[1]
            value = args[2] if len(args) > 2 and args[2] is not None else 0
            axes = args[3] if len(args) > 3 and args[3] is not None else None
        pads_given = [int(p) for p in np.asarray(pads_given).ravel()]
        axes = list(range(rank)) if axes is None else [_axis(int(a), rank) for a in np.asarray(axes).ravel()]
        begin, end = [0] * rank, [0] * rank
        for k, a in enumerate(axes):
            begin[a], end[a] = pads_given[k], pads_given[k + len(axes)]
        out_shape = tuple(x.shape[d] + begin[d] + end[d] for d in range(rank))
        if any(d < 0 for d in out_shape):  # negative pads crop; they cannot crop past the input
            raise ValueError(f"Pad node {node.name!r}: pads {pads_given} on input shape {list(x.shape)} "
                             f"give a negative output shape {list(out_shape)}")
        st = wgsl.strides(x.shape)
        lines = [wgsl.decompose("i", out_shape, "c"), "  var inside = true;"]
        for d in range(rank):
            size = x.shape[d]
            lines.append(f"  var p{d} = i32(c{d}) - {begin[d]};")
            if mode == "constant":
                lines.append(f"  if (p{d} < 0 || p{d} >= {size}) {{ inside = false; p{d} = 0; }}")
            elif mode == "edge":
                lines.append(f"  p{d} = clamp(p{d}, 0, {size - 1});")
            else:  # reflect (mirror without repeating the edge)
                lines.append(f"  if (p{d} < 0) {{ p{d} = -p{d}; }}")
                lines.append(f"  if (p{d} >= {size}) {{ p{d} = {2 * (size - 1)} - p{d}; }}")
                lines.append(f"  p{d} = clamp(p{d}, 0, {max(size - 1, 0)});")
        index = " + ".join(f"u32(p{d}) * {st[d]}u" for d in range(rank)) or "0u"
        fill = wgsl.store(_literal(value, x.dtype), x.dtype)
        lines.append(f"  if (inside) {{ out0[i] = in0[{index}]; }} else {{ out0[i] = {fill}; }}")
        body = "\n".join(lines)
        n = _prod(out_shape)
        source = _copy_source(x.dtype, n, body)
        source = source.replace("\n@compute", wgsl.helpers_for(body) + "\n@compute", 1)
        return Prepared([(out_shape, x.dtype)], [Dispatch(rt.gpu.pipeline(source), (0,), (0,), wgsl.groups_1d(n))])

    return shader_kernel(rt, prepare, host_inputs=frozenset() if legacy else frozenset({1, 2, 3}))
