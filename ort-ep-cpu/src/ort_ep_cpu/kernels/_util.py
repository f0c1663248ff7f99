"""Helpers shared by kernel builders."""

from __future__ import annotations

import ctypes
import dataclasses
import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ort_core import GraphView, Kernel, KernelRequest, NodeView

from . import _jit


def const_input(node: NodeView, request: KernelRequest, k: int) -> np.ndarray | None:
    """The value of input ``k`` if it is an initializer (known at session creation), else None."""
    if k >= len(node.inputs) or not node.inputs[k]:
        return None
    return request.value(node.inputs[k]).const_value


def fixed_constant(graph: GraphView, name: str) -> np.ndarray | None:
    """The value of a constant the user cannot override at run time (an initializer that is not
    a graph input, or a Constant node's output), else None. A group reads its weights from the
    graph once; an overridable initializer would arrive as a feed the group never sees."""
    value = graph.value(name)
    if value.is_graph_input:
        return None
    return value.const_value


#: per graph: DequantizeLinear outputs of fixed constants, computed once (read-only arrays)
_DEQUANTIZED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def dequantized_constant(graph: GraphView, name: str) -> np.ndarray | None:
    """The output of a DequantizeLinear of fixed constants (a QDQ model's weights, bias and
    BatchNormalization parameters), as its kernel computes it, else None. Computed once per
    graph and read-only: the DequantizeLinear kernel returns this very array every run, and
    the kernels reading it (MatMul, Gemm, the oneDNN groups; not a Conv outside the groups,
    see ``build_conv``) take it as the constant it is, so they prepare it once
    (``constant_weight``)."""
    index = graph.producer.get(name) if name else None
    if index is None:
        return None
    cache = _DEQUANTIZED.setdefault(graph, {})
    if name in cache:
        return cache[name]
    node = graph.nodes[index]
    value = None
    if node.op_type == "DequantizeLinear" and not node.domain and len(node.outputs) == 1:
        arrays = [fixed_constant(graph, n) if n else None for n in node.inputs]
        if (arrays[0] is not None and all(a is not None for n, a in zip(node.inputs, arrays) if n)
                and arrays[1].dtype == np.float32 and not node.attr("output_dtype", 0)):
            from .quant import dequantize  # noqa: PLC0415  (quant imports onnx)

            x = arrays[0]
            axis = int(node.attr("axis", 1))
            axis = axis + x.ndim if axis < 0 else axis
            try:
                value = dequantize(x, arrays[1], arrays[2] if len(arrays) > 2 else None, axis if x.ndim else 0,
                                   int(node.attr("block_size", 0) or 0))
            except ValueError:
                value = None
            else:
                value = np.asarray(value, order="C")  # (ascontiguousarray makes 0-d arrays 1-d)
                value.flags.writeable = False
    cache[name] = value
    return value


class PreparedFor:
    """What a kernel makes from the arrays it is handed (transposed or converted weights), kept
    for those very arrays: a constant initializer is the same array every run, so it is
    prepared once; other arrays (an initializer fed at run time) are prepared again."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[tuple, Any]] = {}

    def get(self, key: str, sources: tuple, make: Callable[[], Any]) -> Any:
        """``make()`` for ``sources`` (compared by identity), made at the first call for them."""
        held = self._held.get(key)
        if held is not None and len(held[0]) == len(sources):  # (asked every run: no generator)
            for kept, given in zip(held[0], sources):
                if kept is not given:
                    break
            else:
                return held[1]
        held = self._held[key] = (sources, make())
        return held[1]


def constant_weight(node: NodeView, request: KernelRequest, k: int,
                    dequantized: bool = True) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(the constant input ``k`` as given, the array a GEMM should use for it), or (None, None)
    where input ``k`` is not a constant. The second is the first with its subnormal values set
    to 0: numpy's BLAS (OpenBLAS) has no flush-to-zero mode, and each multiply by a subnormal
    weight takes a microcode assist, about 30x slower (ocr-rec's squeeze-excite convolutions
    have a third of their weights subnormal: 31 -> 3 us per GEMV). A subnormal weight w
    contributes |w * x| < 1.2e-38 * |x| to a sum, so outputs change by no more than that per
    term (onnxruntime's ``session.set_denormal_as_zero`` does the same on its threads for every
    value). Kernels use the second only while they are handed the first (``w is given``), so an
    initializer overridden at run time is used as fed. ``dequantized``: a DequantizeLinear of
    fixed constants counts as a constant too (``dequantized_constant``)."""
    given = const_input(node, request, k)
    if given is None and dequantized and k < len(node.inputs):  # QDQ weights: DequantizeLinear of constants
        given = dequantized_constant(request.graph, node.inputs[k])
    if given is None or not isinstance(given, np.ndarray) or given.dtype.kind != "f":
        return given, given
    return given, without_subnormals(given)


def without_subnormals(weights: np.ndarray) -> np.ndarray:
    """Float ``weights`` with their subnormal values set to 0 (a copy), or ``weights`` itself
    where there are none (see ``constant_weight``; oneDNN's kernels take the same assists: a
    1x1 convolution 480->120 with a third of its weights subnormal, 90 against 8.5 us).
    Only float32 and float64: float16 weights are multiplied in float32, where their subnormals
    are normal numbers (flushing them moved 14% of a float16 convolution's outputs by an ulp)."""
    if weights.dtype not in (np.float32, np.float64):
        return weights
    tiny = np.finfo(weights.dtype).tiny
    flat = weights.reshape(-1)
    flushed = None
    # in chunks: the comparisons' temporaries of a whole weight matrix were 1.25x its size at
    # session creation, at the peak of its memory
    for start in range(0, flat.size, _SUBNORMAL_CHUNK):
        part = flat[start:start + _SUBNORMAL_CHUNK]
        subnormal = (np.abs(part) < tiny) & (part != 0)
        if subnormal.any():
            if flushed is None:
                flushed = weights.copy()
            flushed.reshape(-1)[start:start + _SUBNORMAL_CHUNK][subnormal] = 0
    return weights if flushed is None else flushed


#: float16 arrays of fewer elements convert through numpy (the compiled call's own cost)
_COMPILED_HALF_MIN = 256


def as_float32(x: np.ndarray) -> np.ndarray:
    """``x`` in float32 (itself if it is): float16 by the compiled loop (``_jit.half_to_float``)
    where it applies, else numpy's astype (the same values)."""
    if x.dtype == np.float16 and x.size >= _COMPILED_HALF_MIN and (loop := _jit.half_to_float()) is not None:
        x = np.ascontiguousarray(x)
        y = np.empty(x.shape, np.float32)
        loop(x.reshape(-1).view(np.uint16), y.reshape(-1).view(np.uint32))
        return y
    return x.astype(np.float32, copy=False)


def as_dtype(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``y`` in ``dtype`` (itself if it is): float32 to float16, rounded to nearest even, by the
    compiled loop (``_jit.float_to_half``) where it applies, else numpy's astype (the same
    values)."""
    if dtype != np.float16 or y.dtype == np.float16:
        return y.astype(dtype, copy=False)
    if y.dtype == np.float32 and y.size >= _COMPILED_HALF_MIN and (loop := _jit.float_to_half()) is not None:
        y = np.ascontiguousarray(y)
        h = np.empty(y.shape, np.float16)
        loop(y.reshape(-1).view(np.uint32), h.reshape(-1).view(np.uint16))
        return h
    with np.errstate(over="ignore"):  # beyond float16's range: inf, as the compiled loop gives
        return y.astype(dtype)


#: elements per pass of ``without_subnormals``
_SUBNORMAL_CHUNK = 1 << 16


def as_rows(x: np.ndarray) -> np.ndarray:
    """``x`` as the (rows, features) matrix the ai.onnx.ml ops read: up to 1-D, one row; else
    the first axis the rows and the others flattened. The features are counted, not left to
    ``reshape(rows, -1)``, which cannot work them out for zero rows (an empty batch)."""
    if x.ndim <= 1:
        return x.reshape(1, -1)
    return x.reshape(x.shape[0], math.prod(x.shape[1:]))


def has_input(node: NodeView, k: int) -> bool:
    return k < len(node.inputs) and bool(node.inputs[k])


def normalize_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


#: per-node caches of results worked out per input shape (below) hold at most this many shapes
SHAPE_CACHE_MAX = 64


_vectors: dict[tuple[int, int, np.dtype], np.ndarray] = {}


def _constant_vector(value: int, n: int, dtype: np.dtype) -> np.ndarray:
    key = (value, n, np.dtype(dtype))
    vector = _vectors.get(key)
    if vector is None:
        if len(_vectors) >= SHAPE_CACHE_MAX:  # inputs of ever new sizes: keep it bounded
            _vectors.clear()
        vector = _vectors[key] = np.full(n, value, dtype=dtype)
    return vector


def ones_vector(n: int, dtype: np.dtype) -> np.ndarray:
    """A vector of ``n`` ones, kept per (n, dtype): row sums as GEMVs. Shared: not to be written."""
    return _constant_vector(1, n, dtype)


def zeros_vector(n: int, dtype: np.dtype) -> np.ndarray:
    """A vector of ``n`` zeros, kept per (n, dtype): the bias of a compiled loop given none,
    without an allocation per run. Shared: not to be written."""
    return _constant_vector(0, n, dtype)


_ZEROS: dict[np.dtype, np.ndarray] = {}


def zero(dtype: np.dtype) -> np.ndarray:
    """A 0-d zero of ``dtype``, kept per dtype (read-only): numpy's ufuncs take it at half the
    cost of a scalar, whose promotion rules cost about 0.45 us a call (a Relu of 112 values:
    0.88 -> 0.41 us; a streaming model's tiny Relus add up). Same results: the same dtype."""
    held = _ZEROS.get(dtype)
    if held is None:
        held = np.zeros((), dtype)
        held.flags.writeable = False
        _ZEROS[np.dtype(dtype)] = held
    return held


#: parameters of up to this many elements are remembered by value in ``per_shape``
_HELD_MAX_ELEMENTS = 64


def per_shape(node: NodeView, request: KernelRequest, params: range,
              compute: Callable[..., Any]) -> Callable[..., Any]:
    """For ops whose parameter inputs (input indices ``params``) are usually fixed: a
    ``lookup(shape, *params)`` that returns ``compute(shape, *params)`` (an index, an output
    shape; it raises on bad input), worked out once per input shape and kept (Python list and
    int work is 1-3 us per small op) while the arguments are the node's constant arrays, or
    small arrays of the same values (by their bytes: parameters computed each run, as a
    Reshape's target from Shape -> Concat or silero-vad v4's reflect Pad's pads, whose index
    took 30 us to make each run), else each call."""
    consts = tuple(const_input(node, request, k) for k in params)
    cache: dict[tuple, Any] = {}
    held: dict[tuple, Any] = {}  # (shape, each argument's (type, shape, bytes)) -> result
    missing = object()

    def lookup(shape: tuple, *args: Any) -> Any:
        for a, c in zip(args, consts):  # a loop: all() over a generator costs twice as much
            if a is not c:
                break
        else:
            found = cache.get(shape, missing)
            if found is missing:
                if len(cache) >= SHAPE_CACHE_MAX:
                    cache.clear()
                found = cache[shape] = compute(shape, *args)
            return found
        key = [shape]
        for a in args:
            if a is None:
                key.append(None)
            elif type(a) is np.ndarray and a.size <= _HELD_MAX_ELEMENTS and a.dtype.kind in "biuf":
                # (numbers only: an object array's bytes are its elements' addresses)
                key.append((a.dtype.char, a.shape, a.tobytes()))
            else:
                return compute(shape, *args)
        found = held.get(tuple(key), missing)
        if found is missing:
            if len(held) >= SHAPE_CACHE_MAX:
                held.clear()
            found = held[tuple(key)] = compute(shape, *args)
        return found

    return lookup


class MemberError(RuntimeError):
    """A member of a fused group failed; the message names the member node (core names only the
    group)."""


def member_label(node: NodeView, group: str) -> str:
    """How errors name a member node of a fused group ("oneDNN group", "shape group")."""
    return f"{node.op_type} node {node.name!r} of the {group}"


class GroupMembers:
    """The nodes of a fused group (``request.nodes``), each with its own CPU kernel from
    ``build_node``, run in order on the group's inputs; a member input the group is not handed
    is a constant initializer's data. ``group`` names the group in errors ("oneDNN group")."""

    def __init__(self, request: KernelRequest, build_node: Callable[[NodeView, KernelRequest], Kernel],
                 group: str):
        graph, nodes = request.graph, request.nodes
        self.nodes = nodes
        self.group = group
        self.kernels = [
            build_node(node, dataclasses.replace(request, nodes=(node,), inputs=node.inputs + node.implicit_inputs,
                                                 outputs=node.outputs, fused=False))
            for node in nodes
        ]
        self.inputs, self.outputs = request.inputs, request.outputs
        made = {name for node in nodes for name in node.outputs}
        # per member input: its value's name, or (where the group is not handed it) the constant
        self.sources = [[(n, None) if not n or n in self.inputs or n in made else ("", graph.value(n).const_value)
                         for n in node.inputs] for node in nodes]

    def run(self, args: Sequence[Any]) -> list[Any]:
        """The group's outputs from its inputs ``args``, by every member's own kernel."""
        values = dict(zip(self.inputs, args))
        for node, member, node_sources in zip(self.nodes, self.kernels, self.sources):
            feeds = [values[n] if n else constant for n, constant in node_sources]
            try:
                result = member.run(*feeds)
            except Exception as error:
                raise MemberError(f"{member_label(node, self.group)}: {type(error).__name__}: {error}") from error
            values.update(zip(node.outputs, (result,) if member.single_output else result))
        return [values[n] for n in self.outputs]


def _data_field_reader() -> Callable[[np.ndarray], int] | None:
    """A reader of an array's data pointer from numpy's C struct (``PyArrayObject_fields``: the
    pointer is its first field, right after the object header, whose size is ``object``'s),
    or None where a probe array's pointer is not found there (another layout)."""
    offset = object.__basicsize__
    read = ctypes.c_void_p.from_address

    def data_field(a: np.ndarray) -> int:
        if not isinstance(a, np.ndarray):  # (a numpy scalar's struct is another)
            raise TypeError(f"data_address: a numpy array, not {type(a).__name__}")
        return read(id(a) + offset).value

    probes = [np.empty(3, np.float32), np.empty((2, 5), np.uint8)[:, 1:]]
    return data_field if all(data_field(p) == p.ctypes.data for p in probes) else None


#: ``data_address(a)``: the address of a numpy array's first element. ``a.ctypes.data`` builds
#: a ctypes object for it (0.8 us; two a oneDNN call, a third of a small one's cost); the field
#: is read directly where numpy's layout is the one expected (0.1 us)
data_address: Callable[[np.ndarray], int] = _data_field_reader() or (lambda a: a.ctypes.data)
