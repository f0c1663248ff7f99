"""Level-2 (ORT_ENABLE_EXTENDED) passes: fusions into onnxruntime's contrib ops
(domain ``com.microsoft``), so that an optimized model written by ``optimized_model_filepath``
also loads in onnxruntime.

A fused op runs only if a provider computes it, and core knows no provider: every fusion asks
``supports(node)`` (see ``gate.py``) before it rewrites; a fusion whose op (with those
attributes) the session's first provider does not declare in ``ProviderSpec.fused_ops`` and
claim is not applied.

    FusedConv   Conv + Relu/Tanh/Sigmoid/LeakyRelu/Clip/HardSigmoid (attribute ``activation``)
    FusedGemm   Gemm + the same activations but Clip (onnxruntime's FusedGemm has none)
    Gelu        x * 0.5 * (1 + Erf(x / sqrt(2))) in the orders exporters write it
    FastGelu    x * 0.5 * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), the same orders
    QuickGelu   x * Sigmoid(x) (swish) and x * Sigmoid(alpha * x), attribute ``alpha``
    FusedMatMul MatMul(a, Transpose(b) swapping the last two axes) scaled by a constant
    MatMulIntegerToFloat  MatMulInteger + Cast to float + Mul by the product of the scales (+ Add
                of a bias): ``onnxruntime.quantization.quantize_dynamic``'s matmuls
"""

from __future__ import annotations

import math
from collections.abc import Callable

import onnx_ir as ir

from ._ir import attr, const, detach, graphs, is_op, only_use, replace, scalar

MS_DOMAIN = "com.microsoft"
#: ort-core's own domain, for fused ops that neither the ONNX standard (at the model's opset) nor
#: onnxruntime's contrib ops have; made at level ORT_ENABLE_ALL only (see HardSwishFusionPass)
CORE_DOMAIN = "ort_core"

#: ``supports(node) -> bool``: whether the session's provider claims this (fused) node
Supports = Callable[[ir.Node], bool]

#: the activations FusedConv and FusedGemm take (attribute ``activation``)
ACTIVATIONS = ("Relu", "Tanh", "Sigmoid", "LeakyRelu", "Clip", "HardSigmoid")
#: those FusedGemm takes
GEMM_ACTIVATIONS = ("Relu", "Tanh", "Sigmoid", "LeakyRelu", "HardSigmoid")


def _activation_params(node: ir.Node) -> list[float] | None:
    """The activation's parameters as FusedConv's ``activation_params``; None if not fusable."""
    op = node.op_type
    if op in ("Relu", "Tanh", "Sigmoid"):
        return []
    if op == "LeakyRelu":
        return [float(attr(node, "alpha", 0.01))]
    if op == "HardSigmoid":
        return [float(attr(node, "alpha", 0.2)), float(attr(node, "beta", 0.5))]
    if op == "Clip":
        if "min" in node.attributes or "max" in node.attributes:  # opset < 11
            return [float(attr(node, "min", -3.4028234663852886e38)), float(attr(node, "max", 3.4028234663852886e38))]
        bounds = []
        for k, default in ((1, -3.4028234663852886e38), (2, 3.4028234663852886e38)):
            if len(node.inputs) > k and node.inputs[k] is not None:
                v = scalar(node.inputs[k])
                if v is None:
                    return None
                bounds.append(v)
            else:
                bounds.append(default)
        return bounds
    return None


def _typed_like(value: ir.Value, like: ir.Value) -> None:
    value.type, value.shape = like.type, like.shape


def _follow_activation(value: ir.Value) -> tuple[ir.Node, list[float]] | None:
    act = only_use(value)
    if act is None or act.domain not in ("", "ai.onnx") or act.op_type not in ACTIVATIONS:
        return None
    if act.inputs[0] is not value:
        return None
    params = _activation_params(act)
    return None if params is None else (act, params)


class _FusionPass(ir.passes.InPlacePass):
    def __init__(self, supports: Supports):
        super().__init__()
        self.supports = supports

    def claimed(self, fused: ir.Node) -> bool:
        """Ask the gate whether the provider claims ``fused``; a declined candidate is detached
        from its inputs, so that it does not count as a reader of them in later matches."""
        if self.supports(fused):
            return True
        detach(fused)
        return False

    def fuse(self, graph: ir.Graph, nodes: list[ir.Node], fused: ir.Node, out: ir.Value) -> bool:
        """Replace ``nodes`` (whose result is ``out``) by the single-output ``fused`` node if the
        provider claims it; ``fused`` is typed like ``out`` first (the probe shows providers
        typed values). Whether it was replaced."""
        _typed_like(fused.outputs[0], out)
        if not self.claimed(fused):
            return False
        replace(graph, nodes, [fused], [out], [fused.outputs[0]])
        return True


#: what an anchored fusion finds: the nodes it replaces, the fused node, the value they give
_Found = tuple[list[ir.Node], ir.Node, ir.Value]


class _AnchoredFusionPass(_FusionPass):
    """A fusion found from one node of the ``anchors`` op types: ``found(node)`` gives what
    replaces what, or None; the rewrite is gated as every fusion's (``fuse``), and a fused op
    of ``domain`` adds that domain to the model's opsets."""

    anchors: tuple[str, ...]
    domain: str = MS_DOMAIN

    def found(self, node: ir.Node) -> _Found | None:
        raise NotImplementedError

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in graphs(model.graph):
            for node in list(graph):
                if node.graph is not graph or not any(is_op(node, op) for op in self.anchors):
                    continue  # (or a node removed by an earlier match in this walk)
                found = self.found(node)
                if found is not None:
                    nodes, fused, out = found
                    modified |= self.fuse(graph, nodes, fused, out)
        if modified and self.domain:
            model.opset_imports.setdefault(self.domain, 1)
        return ir.passes.PassResult(model, modified)


class _ActivationFusionPass(_FusionPass):
    """``op_type`` + activation -> com.microsoft ``fused_op`` (same inputs and attributes, plus
    the activation's name and parameters in the fused op's spelling)."""

    op_type: str
    fused_op: str
    activations: tuple[str, ...] = ACTIVATIONS  # those the fused op takes

    def activation_attributes(self, act: ir.Node, params: list[float]) -> list[ir.Attr]:
        raise NotImplementedError

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in graphs(model.graph):
            for node in list(graph):
                if not is_op(node, self.op_type):
                    continue
                found = _follow_activation(node.outputs[0])
                if found is None:
                    continue
                act, params = found
                if act.op_type not in self.activations:
                    continue
                attributes = [*node.attributes.values(), ir.AttrString("activation", act.op_type)]
                attributes.extend(self.activation_attributes(act, params))
                fused = ir.Node(MS_DOMAIN, self.fused_op, list(node.inputs), attributes, num_outputs=1,
                                name=node.name, version=1)
                modified |= self.fuse(graph, [node, act], fused, act.outputs[0])
        if modified:
            model.opset_imports.setdefault(MS_DOMAIN, 1)
        return ir.passes.PassResult(model, modified)


class ConvActivationFusionPass(_ActivationFusionPass):
    """Conv + activation -> com.microsoft FusedConv."""

    op_type, fused_op = "Conv", "FusedConv"

    def activation_attributes(self, act: ir.Node, params: list[float]) -> list[ir.Attr]:
        return [ir.AttrFloat32s("activation_params", params)] if params else []


class GemmActivationFusionPass(_ActivationFusionPass):
    """Gemm + activation -> com.microsoft FusedGemm."""

    op_type, fused_op = "Gemm", "FusedGemm"
    # onnxruntime's FusedGemm refuses Clip ("unknown kernel type"): a model written with it
    # would not load there
    activations = GEMM_ACTIVATIONS

    def activation_attributes(self, act: ir.Node, params: list[float]) -> list[ir.Attr]:
        return [ir.AttrFloat32(name, v) for name, v in zip(("activation_alpha", "activation_beta"), params)]


def _close(v: float | None, target: float, tol: float = 1e-4) -> bool:
    return v is not None and abs(v - target) <= tol * max(1.0, abs(target))


def _near(value: ir.Value | None, target: float, tol: float = 1e-4) -> bool:
    """``value`` is a constant scalar within ``tol`` (relative) of ``target``."""
    return _close(scalar(value), target, tol)


def _other(node: ir.Node, value: ir.Value) -> ir.Value | None:
    """The input of a binary node that is not ``value``."""
    a, b = node.inputs[0], node.inputs[1]
    return b if a is value else a if b is value else None


class GeluFusionPass(_AnchoredFusionPass):
    """0.5 * x * (1 + Erf(x / sqrt(2))) -> com.microsoft Gelu. Accepts x/sqrt(2) or
    x*(1/sqrt(2)), and the products in any order: (x * (1+erf)) * 0.5, x * ((1+erf) * 0.5),
    (x * 0.5) * (1+erf)."""

    anchors = ("Erf",)

    def found(self, erf: ir.Node) -> _Found | None:
        match = self._match(erf)
        if match is None:
            return None
        x, nodes, out = match
        return nodes, ir.Node(MS_DOMAIN, "Gelu", [x], num_outputs=1, name=f"{erf.name}_gelu", version=1), out

    @staticmethod
    def _match(erf: ir.Node):
        scale = erf.inputs[0].producer()
        if scale is None or erf.inputs[0].is_graph_output() or len(list(erf.inputs[0].uses())) != 1:
            return None
        if is_op(scale, "Div") and _near(scale.inputs[1], math.sqrt(2.0)):
            x = scale.inputs[0]
        elif is_op(scale, "Mul") and _near(scale.inputs[1], 1 / math.sqrt(2.0)):
            x = scale.inputs[0]
        elif is_op(scale, "Mul") and _near(scale.inputs[0], 1 / math.sqrt(2.0)):
            x = scale.inputs[1]
        else:
            return None
        tail = _half_x_times_one_plus(erf, x)
        if tail is None:
            return None
        nodes, out = tail
        return x, [scale, erf, *nodes], out


def _half_x_times_one_plus(f: ir.Node, x: ir.Value) -> tuple[list[ir.Node], ir.Value] | None:
    """The end both Gelu forms share, 0.5 * x * (1 + f(..)), after ``f`` (Erf or Tanh), in the
    orders exporters write: (x * (1 + f)) * 0.5, x * ((1 + f) * 0.5), (x * 0.5) * (1 + f). The
    nodes after ``f`` (the Mul of x by 0.5 among them) and the value they give, or None."""
    add = only_use(f.outputs[0])
    if not is_op(add, "Add") or not _near(_other(add, f.outputs[0]), 1.0):
        return None
    mul1 = only_use(add.outputs[0])
    if not is_op(mul1, "Mul"):
        return None
    partner = _other(mul1, add.outputs[0])
    if partner is x:  # (x * (1 + f)) * 0.5
        mul2 = only_use(mul1.outputs[0])
        if is_op(mul2, "Mul") and _near(_other(mul2, mul1.outputs[0]), 0.5):
            return [add, mul1, mul2], mul2.outputs[0]
        return None
    if _near(partner, 0.5):  # x * ((1 + f) * 0.5)
        mul2 = only_use(mul1.outputs[0])
        if is_op(mul2, "Mul") and _other(mul2, mul1.outputs[0]) is x:
            return [add, mul1, mul2], mul2.outputs[0]
        return None
    half = partner.producer() if partner is not None else None  # (x * 0.5) * (1 + f)
    if (is_op(half, "Mul") and only_use(partner) is mul1 and _other(half, x) is not None
            and _near(_other(half, x), 0.5)):
        return [half, add, mul1], mul1.outputs[0]
    return None


def _times_constant(node: ir.Node | None, target: float) -> ir.Value | None:
    """Where ``node`` is a Mul of a value by a constant scalar near ``target``, that value."""
    if not is_op(node, "Mul"):
        return None
    a, b = node.inputs
    if _near(b, target, 1e-5):
        return a
    if _near(a, target, 1e-5):
        return b
    return None


class FastGeluFusionPass(_AnchoredFusionPass):
    """The tanh approximation of Gelu, 0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3))),
    -> com.microsoft FastGelu(x), after onnxruntime's FastGeluFusion (GPT-2's and T5 v1.1's
    gelu_new, PyTorch's gelu(approximate="tanh")): x^3 as Pow(x, 3) or x * x * x, the constant
    products in either order, and the three orders of the outer products."""

    anchors = ("Tanh",)

    def found(self, tanh: ir.Node) -> _Found | None:
        match = self._match(tanh)
        if match is None:
            return None
        x, nodes, out = match
        if x.type is not None and x.dtype not in (ir.DataType.FLOAT, ir.DataType.FLOAT16):
            return None
        return nodes, ir.Node(MS_DOMAIN, "FastGelu", [x], num_outputs=1, name=f"{tanh.name}_fastgelu", version=1), out

    @staticmethod
    def _match(tanh: ir.Node):
        scaled = tanh.inputs[0]
        outer = scaled.producer() if scaled is not None else None
        if outer is None or only_use(scaled) is not tanh:
            return None
        inner = _times_constant(outer, math.sqrt(2 / math.pi))
        add = inner.producer() if inner is not None else None
        if not is_op(add, "Add") or only_use(inner) is not outer:
            return None
        for x, cubic in ((add.inputs[0], add.inputs[1]), (add.inputs[1], add.inputs[0])):
            cube_times = cubic.producer() if cubic is not None else None
            cube = _times_constant(cube_times, 0.044715)
            if cube is None or only_use(cubic) is not add:
                continue
            cube_nodes = _cube_of(cube, x)
            if cube_nodes is None or only_use(cube) is not cube_times:
                continue
            tail = _half_x_times_one_plus(tanh, x)
            if tail is None:
                return None
            nodes, out = tail
            return x, [*cube_nodes, cube_times, add, outer, tanh, *nodes], out
        return None


class QuickGeluFusionPass(_AnchoredFusionPass):
    """x * Sigmoid(x) (swish, SiLU) and x * Sigmoid(alpha * x) -> com.microsoft QuickGelu(x,
    alpha), as onnxruntime's QuickGeluFusion does at this level (alpha 1 for swish, the
    constant's value for CLIP's x * sigmoid(1.702 x)); the products either way round. One pass
    over the tensor instead of two or three and their arrays (YOLO and EfficientNet heads,
    LLaMA-style MLPs, quantized OCR models between their integer convolutions)."""

    anchors = ("Sigmoid",)

    def found(self, sigmoid: ir.Node) -> _Found | None:
        v = sigmoid.inputs[0]
        mul = only_use(sigmoid.outputs[0])
        if v is None or not is_op(mul, "Mul"):
            return None
        partner = _other(mul, sigmoid.outputs[0])
        candidates = [(v, 1.0, [sigmoid])]  # swish of v itself
        scale = v.producer()
        if is_op(scale, "Mul") and only_use(v) is sigmoid:  # sigmoid(alpha * x), alpha first
            for x, factor in ((scale.inputs[0], scale.inputs[1]), (scale.inputs[1], scale.inputs[0])):
                alpha, data = scalar(factor), const(factor)
                if alpha is not None and x is not None and (data.ndim == 0 or (x.shape is not None and len(x.shape) >= data.ndim)):
                    candidates.insert(0, (x, alpha, [scale, sigmoid]))
        for x, alpha, nodes in candidates:
            if partner is not x:
                continue
            if x.type is not None and x.dtype != ir.DataType.FLOAT:
                return None  # (onnxruntime's CPU QuickGelu is float32's)
            fused = ir.Node(MS_DOMAIN, "QuickGelu", [x], attributes=[ir.AttrFloat32("alpha", alpha)], num_outputs=1,
                            name=f"{sigmoid.name}_quickgelu", version=1)
            return [*nodes, mul], fused, mul.outputs[0]
        return None


def _cube_of(cube: ir.Value, x: ir.Value) -> list[ir.Node] | None:
    """The nodes making ``cube`` = x^3: Pow(x, 3), or Mul(x, Mul(x, x)) either way round."""
    node = cube.producer()
    if is_op(node, "Pow"):
        return [node] if node.inputs[0] is x and _near(node.inputs[1], 3.0, 1e-6) else None
    if not is_op(node, "Mul"):
        return None
    a, b = node.inputs
    square_value = b if a is x else a if b is x else None
    square = square_value.producer() if square_value is not None else None
    if (is_op(square, "Mul") and square.inputs[0] is x and square.inputs[1] is x
            and only_use(square_value) is node):
        return [square, node]
    return None


class MatMulScaleFusionPass(_FusionPass):
    """MatMul(a, Transpose(b, last two axes swapped)) followed by Mul/Div by a constant scalar
    -> com.microsoft FusedMatMul(a, b, transB=1, alpha=scale). The transpose is folded into the
    BLAS call and the scaling into its alpha."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in graphs(model.graph):
            for mm in list(graph):
                if not is_op(mm, "MatMul"):
                    continue
                scale_node = only_use(mm.outputs[0])
                alpha = None
                if is_op(scale_node, "Mul"):
                    alpha = scalar(_other(scale_node, mm.outputs[0]))
                elif is_op(scale_node, "Div") and scale_node.inputs[0] is mm.outputs[0]:
                    d = scalar(scale_node.inputs[1])
                    alpha = None if not d else 1.0 / d
                if alpha is None:
                    continue
                a, b = mm.inputs
                nodes = [mm, scale_node]
                trans_b = 0
                tr = b.producer()
                if is_op(tr, "Transpose") and only_use(b) is mm:
                    perm = attr(tr, "perm")
                    rank = len(perm) if perm is not None else None
                    if rank and rank >= 2 and list(perm) == list(range(rank - 2)) + [rank - 1, rank - 2]:
                        b, trans_b = tr.inputs[0], 1
                        nodes.insert(0, tr)
                fused = ir.Node(MS_DOMAIN, "FusedMatMul", [a, b],
                                [ir.AttrFloat32("alpha", alpha), ir.AttrInt64("transA", 0), ir.AttrInt64("transB", trans_b)],
                                num_outputs=1, name=mm.name, version=1)
                modified |= self.fuse(graph, nodes, fused, scale_node.outputs[0])
        if modified:
            model.opset_imports.setdefault(MS_DOMAIN, 1)
        return ir.passes.PassResult(model, modified)


#: what a hard-swish match is: x, the nodes it replaces, and the value they produce
_HardSwishMatch = tuple[ir.Value, list[ir.Node], ir.Value]


def _hard_swish_from_hard_sigmoid(hs: ir.Node) -> _HardSwishMatch | None:
    """x * HardSigmoid(x, alpha=1/6, beta=0.5)."""
    # float32 attributes: 1/6 is stored as 0.16666667
    if not (_close(float(attr(hs, "alpha", 0.2)), 1 / 6, 1e-5) and _close(float(attr(hs, "beta", 0.5)), 0.5, 1e-5)):
        return None
    x = hs.inputs[0]
    mul = only_use(hs.outputs[0])
    if not is_op(mul, "Mul") or _other(mul, hs.outputs[0]) is not x:
        return None
    return x, [hs, mul], mul.outputs[0]


def _hard_swish_from_clip(clip: ir.Node) -> _HardSwishMatch | None:
    """x * Clip(x + 3, 0, 6) / 6 (or * (1/6)): hard-swish as exporters write it before opset 14."""
    add = clip.inputs[0].producer() if clip.inputs and clip.inputs[0] is not None else None
    if not is_op(add, "Add") or only_use(add.outputs[0]) is not clip:
        return None
    if _near(add.inputs[1], 3.0, 1e-5):
        x = add.inputs[0]
    elif _near(add.inputs[0], 3.0, 1e-5):
        x = add.inputs[1]
    else:
        return None
    bounds = _activation_params(clip)  # [min, max], absent ones as float32's limits
    if bounds is None or not (_close(bounds[0], 0.0, 1e-5) and _close(bounds[1], 6.0, 1e-5)):
        return None
    mul = only_use(clip.outputs[0])
    if not is_op(mul, "Mul") or _other(mul, clip.outputs[0]) is not x:
        return None
    last = only_use(mul.outputs[0])
    if is_op(last, "Div") and last.inputs[0] is mul.outputs[0] and _near(last.inputs[1], 6.0, 1e-5):
        pass
    elif is_op(last, "Mul") and _near(_other(last, mul.outputs[0]), 1 / 6, 1e-5):
        pass
    else:
        return None
    return x, [add, clip, mul, last], last.outputs[0]


class HardSwishFusionPass(_FusionPass):
    """Hard-swish -> one HardSwish(x): one pass over the map instead of two to four and their
    arrays (hard-swish is on every large feature map of MobileNetV3-style models). Both
    spellings: x * HardSigmoid(x, alpha=1/6, beta=0.5), and x * Clip(x + 3, 0, 6) / 6 as
    exporters write it before opset 14.

    HardSwish is standard from opset 14; below it (PaddleOCR's models are opset 11 and 12) the
    fused node is ``HardSwish`` of ort-core's own domain (``CORE_DOMAIN``), same semantics. That
    is why this pass runs at ORT_ENABLE_ALL only: as with onnxruntime's layout ops at that
    level, a model written with it is for this runtime, not for onnxruntime. Where the first
    provider does not claim the fused node, the graph keeps the exporter's spelling: OpenVINO
    fuses Add/Clip/Mul/Div into its convolutions itself, and HardSigmoid+Mul in its place made
    it 1.9x slower on ocr-det (94 against 50 ms at batch 8)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        standard = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 1)) >= 14
        domain = "" if standard else CORE_DOMAIN
        modified = False
        for graph in graphs(model.graph):
            for node in list(graph):
                if node.graph is not graph:
                    continue  # (a node removed by an earlier match in this walk)
                if is_op(node, "HardSigmoid"):
                    match = _hard_swish_from_hard_sigmoid(node)
                elif is_op(node, "Clip"):
                    match = _hard_swish_from_clip(node)
                else:
                    continue
                if match is None:
                    continue
                x, nodes, out = match
                if x.type is not None and x.dtype not in (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16):
                    continue
                fused = ir.Node(domain, "HardSwish", [x], num_outputs=1, name=f"{nodes[-1].name}_hardswish",
                                version=None if standard else 1)
                modified |= self.fuse(graph, nodes, fused, out)
        if modified and not standard:
            model.opset_imports.setdefault(CORE_DOMAIN, 1)
        return ir.passes.PassResult(model, modified)


def _scalar_shaped(value: ir.Value | None) -> bool:
    return value is not None and value.shape is not None and all(isinstance(d, int) and d == 1 for d in value.shape)


def _float32(value: ir.Value | None) -> bool:
    return value is not None and value.type is not None and value.dtype == ir.DataType.FLOAT


class MatMulIntegerToFloatFusionPass(_AnchoredFusionPass):
    """MatMulInteger(a, b, a_zero_point, b_zero_point) -> Cast(to float) -> Mul(., Mul(a_scale,
    b_scale)) [-> Add(., constant bias)] -> com.microsoft MatMulIntegerToFloat(a, b, a_scale,
    b_scale, a_zero_point, b_zero_point[, bias]), as onnxruntime fuses the matmuls of
    ``quantize_dynamic``'s models (a DynamicQuantizeLinear's codes, scale and zero point times
    constant 8-bit weights): one kernel instead of four, and no int32 and float copies of the
    product between them. The same arithmetic: float32(acc) * float32(a_scale * b_scale), then +
    bias. ``a_scale`` is the scalar one of the two scales (a per-column ``b_scale`` stays one)."""

    anchors = ("MatMulInteger",)

    def found(self, mm: ir.Node) -> _Found | None:
        match = self._match(mm)
        if match is None:
            return None
        nodes, a_scale, b_scale, bias, out = match
        zero_points = [mm.inputs[k] if len(mm.inputs) > k else None for k in (2, 3)]
        inputs = [mm.inputs[0], mm.inputs[1], a_scale, b_scale, *zero_points, bias]
        while inputs[-1] is None:
            inputs.pop()
        return nodes, ir.Node(MS_DOMAIN, "MatMulIntegerToFloat", inputs, num_outputs=1, name=mm.name, version=1), out

    @staticmethod
    def _match(mm: ir.Node):
        cast = only_use(mm.outputs[0])
        if not is_op(cast, "Cast") or attr(cast, "to") != ir.DataType.FLOAT:
            return None
        mul = only_use(cast.outputs[0])
        if not is_op(mul, "Mul"):
            return None
        scales = _other(mul, cast.outputs[0])
        product = scales.producer() if scales is not None else None
        if not is_op(product, "Mul") or not all(_float32(v) for v in product.inputs):
            return None
        p, q = product.inputs
        if _scalar_shaped(p):
            a_scale, b_scale = p, q
        elif _scalar_shaped(q):
            a_scale, b_scale = q, p
        else:
            return None
        if b_scale.shape is None or len(b_scale.shape) > 1:
            return None
        nodes, out, bias = [mm, cast, mul], mul.outputs[0], None
        add = only_use(mul.outputs[0])
        if is_op(add, "Add"):
            candidate = _other(add, mul.outputs[0])
            data = const(candidate)
            if data is not None and data.ndim == 1 and data.dtype.kind == "f" and _float32(candidate):
                nodes, out, bias = [*nodes, add], add.outputs[0], candidate
        return nodes, a_scale, b_scale, bias, out
