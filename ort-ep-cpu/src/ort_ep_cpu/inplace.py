"""In-place outputs: an elementwise kernel may write its result into an input's buffer.

This is onnxruntime's "MayInplace" idea, decided inside the provider when it builds a kernel (the
provider contract is unchanged). A fresh output costs an allocation and a pass that writes cold
memory; writing into the input the kernel has just read saves both, and the buffer it would
have freed is the output. numpy makes the in-place form cheap: every ufunc takes ``out=``.

When it is safe. Input ``k`` (value ``v``) of an elementwise node may be overwritten when

statically, at kernel creation (``candidates``):
  * ``v`` is no graph input, initializer, Constant or graph output (of the graph the node is
    in), and it is defined in that graph (not an outer-scope value of a control-flow body);
  * ``v`` is read exactly once in its graph: by this node, at position ``k`` only; reads from
    a subgraph count (they are the reading node's implicit inputs);
  * its producer is a single-output node of an op in ``FRESH_OUTPUT_OPS`` whose kernel this
    provider built in this session with its own registered kernel (not an ONNX function body,
    not onnx.reference): such kernels return an array that nobody else references (a new
    array, a full reshape of one, or, for an in-place kernel, its own dead input);

and at run time, per call (``private``):
  * the array is a writeable ``numpy.ndarray`` that owns its memory (``base is None``), or a
    contiguous view spanning the whole of an array that does (MatMul's (rows, K) @ (K, N)
    product reshaped back to (..., N));
  * its dtype is float32 or float64 and equals the output's (in-place results are then
    bit-identical to the out-of-place ones), and the output's shape equals its shape (the other
    input broadcasts into it; broadcasting the other way gets a fresh output).

Who runs the producer. A ``KernelRequest`` does not say which provider runs the other nodes,
so the provider records which values it produced itself (``record``) and trusts only those:
a producer placed on another provider (an OpenVINO group, a device provider's kernel whose
output core copies to the host) never qualifies, because another provider's kernel may keep or
reuse the array it returns (a cache, a pooled output buffer). Claims are built in node order, so
a producer's kernel is built before its readers'. The run-time check then guards what the
static one cannot see: an array that is a view into someone else's memory (a partial view,
a read-only buffer). The one case neither catches is a plugin that wraps ``ort_create_kernel``
and keeps the arrays kernels return to read them after the run; such a plugin sets the
provider option ``enable_inplace`` to "0".
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ort_core import CORE_DOMAIN, GraphView, Kernel, KernelRequest, NodeView, ProviderContext

from .kernels._util import zero
from .kernels.elementwise import (
    UNARY_UFUNCS,
    clip_v1_bounds,
    clip_values,
    erf_into,
    exp,
    hard_swish_into,
    sigmoid,
    tanh,
)

MS = "com.microsoft"

#: dtypes computed in place: those the out-of-place kernels compute in their own type with the
#: same ufuncs (float16 and the ml_dtypes floats are computed in float32 for several ops)
FLOATS: frozenset[np.dtype] = frozenset({np.dtype(np.float32), np.dtype(np.float64)})


def _clip_has_bounds(node: NodeView) -> bool:
    # Clip-11+ without min and max returns its input itself: its output is not fresh
    return node.opset < 11 or any(node.inputs[1:3])


#: Ops whose CPU kernel always returns an array that no other value shares: a new array, a
#: whole reshape of one, or (an in-place kernel) its input that nobody reads any more. A
#: predicate narrows an op to the configurations that qualify. Not listed on purpose: ops
#: that may return views or their input (Reshape, Flatten, Squeeze, Unsqueeze, Identity,
#: Transpose, Slice, Split, Expand, Cast, Resize, Dropout, Max/Min/Sum of one input), ops
#: whose kernels cache arrays (Constant, ConstantOfShape, Shape), multi-output ops.
#: ``tests/test_inplace.py`` checks every entry against its kernel.
FRESH_OUTPUT_OPS: dict[tuple[str, str], Callable[[NodeView], bool] | None] = {
    **{("", op): None for op in (
        "Conv", "ConvTranspose", "Gemm", "MatMul", "Softmax", "LogSoftmax",
        "BatchNormalization", "LayerNormalization",
        "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
        "Add", "Sub", "Mul", "Div", "Pow",
        "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Exp", "Log", "Neg", "Abs", "Sqrt", "Reciprocal",
        "Erf", "HardSigmoid", "HardSwish",
    )},
    ("", "Clip"): _clip_has_bounds,
    **{(MS, op): None for op in ("FusedConv", "FusedGemm", "FusedMatMul", "Gelu", "BiasGelu")},
    **{(CORE_DOMAIN, op): None for op in ("HardSwish", "LayerNormalization")},
}

# ------------------------------------------------------------------------------------------
# the in-place computations: each writes into ``x`` (or ``out``) and returns it
# ------------------------------------------------------------------------------------------

UnaryInto = Callable[..., np.ndarray]

#: unary ops whose kernel is one ufunc: the same ufunc with ``out=x`` gives the same bits
_UFUNC_UNARY: dict[str, Any] = {
    **{op: UNARY_UFUNCS[op] for op in ("Neg", "Abs", "Sqrt", "Log", "Reciprocal")},
}

#: binary ops whose float kernel is one ufunc on two arrays of the same dtype
BINARY_UFUNCS: dict[str, Any] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Pow": np.power,
}


def _relu_into(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, zero(x.dtype), out=x)


def _sigmoid_into(x: np.ndarray) -> np.ndarray:
    return sigmoid(x, out=x)


def _clip_into(node: NodeView) -> UnaryInto:
    if node.opset < 11:
        lo, hi = clip_v1_bounds(node)

        def clip_attrs(x: np.ndarray) -> np.ndarray:
            np.maximum(x, x.dtype.type(lo), out=x)
            return np.minimum(x, x.dtype.type(hi), out=x)

        return clip_attrs

    def clip(x: np.ndarray, lo: np.ndarray | None = None, hi: np.ndarray | None = None) -> np.ndarray:
        return clip_values(x, lo, hi, out=x)  # Clip's own computation, with ``out=x``

    return clip


def _hard_swish_into(x: np.ndarray) -> np.ndarray:
    return hard_swish_into(x, x)


def unary_into(node: NodeView) -> UnaryInto | None:
    """The in-place form of ``node``'s kernel (a function writing into its first argument),
    or None if the op has none."""
    op = node.op_type
    if op == "HardSwish" and node.domain in ("", CORE_DOMAIN):
        return _hard_swish_into
    if node.domain != "":
        return None
    if op in _UFUNC_UNARY:
        ufunc = _UFUNC_UNARY[op]
        return lambda x: ufunc(x, out=x)
    if op == "Relu":
        return _relu_into
    if op == "Sigmoid":
        return _sigmoid_into
    if op == "Tanh":
        return lambda x: tanh(x, out=x)  # the out-of-place kernel's computation
    if op == "Exp":
        return lambda x: exp(x, out=x)  # the out-of-place kernel's computation
    if op == "Erf":
        return lambda x: erf_into(x, x)  # the out-of-place kernel's computation
    if op == "Clip":
        return _clip_into(node)
    return None


# ------------------------------------------------------------------------------------------
# safety
# ------------------------------------------------------------------------------------------


#: arrays smaller than this are computed out of place: an allocation of a few kB costs less than
#: the checks that allow writing in place (0.3-0.6 us a call on streaming models' tiny tensors)
INPLACE_MIN_ELEMENTS = 1024


def private(x: Any) -> bool:
    """The run-time half of the check: ``x`` is a writeable ndarray owning its memory, or a
    contiguous view of the whole of one (a reshape of a fresh array)."""
    if type(x) is not np.ndarray or not x.flags.writeable:
        return False
    base = x.base
    if base is None:
        return True
    return (
        type(base) is np.ndarray and base.base is None and base.nbytes == x.nbytes and x.flags.c_contiguous
    )


def _broadcasts_into(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    """``small`` broadcasts to ``big`` (so an op of the two has ``big``'s shape)."""
    n = len(small)
    offset = len(big) - n
    if offset < 0:
        return False
    for i in range(n):
        d = small[i]
        if d != 1 and d != big[offset + i]:
            return False
    return True


def _fresh_values(ep: ProviderContext) -> weakref.WeakKeyDictionary[GraphView, set[str]]:
    return ep.state.setdefault("inplace_fresh", weakref.WeakKeyDictionary())


def record(ep: ProviderContext, request: KernelRequest, kernel: Kernel) -> None:
    """Remember the outputs of ``request`` if its kernel returns arrays nobody else holds."""
    if request.fused or kernel.note:  # a note: delegated to onnx.reference or a function body
        return
    node = request.node
    check = FRESH_OUTPUT_OPS.get((node.domain, node.op_type), False)
    if check is False or (check is not None and not check(node)):
        return
    named = [n for n in node.outputs if n]
    if len(named) == 1 and node.outputs[0]:  # other outputs could be views of the same buffer
        _fresh_values(ep).setdefault(request.graph, set()).add(named[0])


def overwritable(ep: ProviderContext, graph: GraphView, node: NodeView, k: int) -> bool:
    """The static half of the check for input ``k`` of ``node`` (see the module docstring)."""
    name = node.inputs[k] if k < len(node.inputs) else ""
    if not name or not graph.defines(name) or graph.consumers.get(name) != [node.index]:
        return False
    if name in node.implicit_inputs:
        return False
    value = graph.value(name)
    if value.is_graph_input or value.is_initializer or value.is_graph_output or value.const_value is not None:
        return False
    fresh = _fresh_values(ep).get(graph)
    return fresh is not None and name in fresh


def candidates(ep: ProviderContext, request: KernelRequest, positions: Sequence[int]) -> tuple[int, ...]:
    """Which of ``positions`` (input indices) the kernel of ``request`` may overwrite."""
    node = request.node
    return tuple(k for k in positions if overwritable(ep, request.graph, node, k))


# ------------------------------------------------------------------------------------------
# the kernels
# ------------------------------------------------------------------------------------------


def _unary_kernel(fallback: Callable[..., Any], into: UnaryInto) -> Callable[..., Any]:
    floats = FLOATS

    def run(x, *rest):
        if type(x) is np.ndarray and x.size >= INPLACE_MIN_ELEMENTS and x.dtype in floats and private(x):
            return into(x, *rest)
        return fallback(x, *rest)

    return run


def _binary_kernel(fallback: Callable[..., Any], ufunc: Any, positions: tuple[int, ...]) -> Callable[..., Any]:
    floats = FLOATS
    into_a, into_b = 0 in positions, 1 in positions
    ndarray = np.ndarray
    fits = _broadcasts_into

    def run(a, b):
        # both arrays of one float dtype (ONNX's T); the overwritten one has the output's shape
        if type(a) is ndarray and type(b) is ndarray and a.dtype in floats and a.dtype == b.dtype:
            if a.size < INPLACE_MIN_ELEMENTS and b.size < INPLACE_MIN_ELEMENTS:
                y = ufunc(a, b)
                return y if type(y) is ndarray else np.asarray(y)
            if into_a and (a.shape == b.shape or fits(b.shape, a.shape)) and private(a):
                return ufunc(a, b, out=a)
            if into_b and (a.shape == b.shape or fits(a.shape, b.shape)) and private(b):
                return ufunc(a, b, out=b)
        return fallback(a, b)

    return run


def adapt(ep: ProviderContext, request: KernelRequest, kernel: Kernel) -> Kernel:
    """``kernel``, or an in-place version of it where ``request``'s node allows one."""
    if request.fused or kernel.note or not kernel.single_output:
        return kernel
    node = request.node
    op = node.op_type
    if node.domain == "" and op in BINARY_UFUNCS and node.opset >= 7 and len(node.inputs) == 2:
        # (before opset 7 broadcasting has its own rules: kernels/elementwise.py)
        positions = candidates(ep, request, (0, 1))
        if positions:
            return Kernel(run=_binary_kernel(kernel.run, BINARY_UFUNCS[op], positions), single_output=True)
        return kernel
    into = unary_into(node)
    if into is not None and candidates(ep, request, (0,)):
        return Kernel(run=_unary_kernel(kernel.run, into), single_output=True)
    return kernel
