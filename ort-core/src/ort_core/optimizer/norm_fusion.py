"""Level-2 (ORT_ENABLE_EXTENDED) fusions of transformer normalisation and GELU patterns, after
onnxruntime's ``LayerNormFusion``, ``SkipLayerNormFusion`` and ``BiasGeluFusion``:

    LayerNormalization      ReduceMean -> Sub -> Pow(2) | Mul(d, d) -> ReduceMean -> Add(eps)
                            -> Sqrt -> Div | Reciprocal+Mul -> [Mul(gamma)] -> [Add(beta)],
                            all over the last axis (ONNX domain from opset 17; below it
                            ort_core's, at ALL only); also the moments form Keras models
                            export, x * s + (beta - mean * s) with s = gamma / sqrt(var + eps),
                            and GlobalAveragePool of 3-D values for the means
    SimplifiedLayerNormalization  Pow(x, 2) | Mul(x, x) -> ReduceMean -> Add(eps) -> Sqrt
                            -> Div(x, rms) | Div(1, rms) or Reciprocal, then Mul(x) ->
                            Mul(gamma), all over the last axis: RMSNorm (T5, LLaMA), the
                            op onnxruntime registers in the ONNX domain
    SkipLayerNormalization  Add(a, b) [with an Add of a 1-D constant bias on either side]
                            -> LayerNormalization (com.microsoft)
    BiasGelu                Add(x, 1-D constant bias) -> Gelu (com.microsoft)

Like the fusions in ``fusion.py``, each one builds the fused node and applies the rewrite only
where ``supports(node)`` says the session's first provider claims it (see ``gate.py``).
``LayerNormalization`` is a standard op, but it is a fusion all the same (one node for nine),
and onnxruntime runs it at EXTENDED for the providers with a kernel for it; so does this one.

The decomposed LayerNorm is fused into the standard op only where the model's default opset is
17 or more: ``LayerNormalization`` does not exist in older opsets and a model is not upgraded
behind the user's back. At ORT_ENABLE_ALL, older models get ``LayerNormalization`` of
ort-core's own domain (``domain_below_17=CORE_DOMAIN``: the same op; onnxruntime does the
same with its own registration of the op below opset 17), as with ``HardSwishFusionPass``.
``SkipLayerNormalization`` is fused only for float and float16, the types of onnxruntime's schema (so that an optimized model written by
``optimized_model_filepath`` still loads in onnxruntime), and only for 2-D or 3-D inputs whose
skip onnxruntime accepts (same shape, ``[1, S, H]`` or ``[S, H]``).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ._ir import Namer, attr, const, graphs, initializer, is_op, only_use, replace, scalar
from .fusion import CORE_DOMAIN, MS_DOMAIN, Supports, _AnchoredFusionPass, _Found, _FusionPass, _other, _typed_like

__all__ = ["BiasGeluFusionPass", "LayerNormFusionPass", "SimplifiedLayerNormFusionPass", "SkipLayerNormFusionPass",
           "Supports"]

_LN_TYPES = (ir.DataType.FLOAT16, ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.BFLOAT16)
_SLN_TYPES = (ir.DataType.FLOAT16, ir.DataType.FLOAT)  # onnxruntime's SkipLayerNormalization schema
_GELU_TYPES = (ir.DataType.FLOAT16, ir.DataType.FLOAT, ir.DataType.DOUBLE)


# --------------------------------------------------------------------------------------------
# small shape helpers
# --------------------------------------------------------------------------------------------


def _dtype(value: ir.Value | None) -> ir.DataType | None:
    if value is None or value.type is None or not isinstance(value.type, ir.TensorType):
        return None
    return value.type.dtype


def _rank(value: ir.Value) -> int | None:
    return None if value.shape is None else value.shape.rank()


def _static(dim) -> int | None:
    """A dimension as an int when it is a known size (exporters write -1 for unknown)."""
    return dim if isinstance(dim, int) and dim >= 0 else None


def _last_dim(value: ir.Value) -> int | None:
    rank = _rank(value)
    return None if not rank else _static(value.shape[rank - 1])


def _vector_length(value: ir.Value | None) -> int | None:
    """The length of a 1-D value of known size; None otherwise."""
    if value is None:
        return None
    if value.shape is not None:
        return _static(value.shape[0]) if value.shape.rank() == 1 else None
    data = const(value)
    return int(data.shape[0]) if data is not None and data.ndim == 1 else None


def _differ(a, b) -> bool:
    """Whether two dimensions are known to differ (unknown or symbolic ones may be equal)."""
    sa, sb = _static(a), _static(b)
    return sa is not None and sb is not None and sa != sb


def _only_use_of(value: ir.Value, node: ir.Node) -> bool:
    """``node`` is the sole reader of ``value`` (it may read it more than once, as Mul(d, d))."""
    if value.is_graph_output():
        return False
    return all(user is node for user, _ in value.uses())


# --------------------------------------------------------------------------------------------
# LayerNormalization
# --------------------------------------------------------------------------------------------


def _reduce_axes(node: ir.Node) -> list[int] | None:
    """ReduceMean's axes: an attribute up to opset 17, a constant input from 18."""
    axes = attr(node, "axes")
    if axes is not None:
        return [int(a) for a in axes]
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        data = const(node.inputs[1])
        return None if data is None else [int(a) for a in data.reshape(-1)]
    return None


def _mean_over_last_axis(node: ir.Node | None, x: ir.Value, rank: int | None) -> bool:
    """``node`` is ReduceMean(x) over the last axis only (of ``rank``), keeping the reduced axis,
    or GlobalAveragePool(x) of a 3-D x, which is the same mean (tf2onnx writes Keras' moments of
    [batch, sequence, hidden] activations so)."""
    if is_op(node, "GlobalAveragePool"):
        return node.inputs[0] is x and rank == 3
    if not is_op(node, "ReduceMean") or node.inputs[0] is not x or int(attr(node, "keepdims", 1)) != 1:
        return False
    axes = _reduce_axes(node)
    if axes is None or len(axes) != 1:
        return False
    return axes[0] == -1 or (rank is not None and axes[0] == rank - 1)


def _is_square_of(node: ir.Node, d: ir.Value) -> bool:
    if is_op(node, "Pow"):
        return node.inputs[0] is d and scalar(node.inputs[1]) == 2.0
    return is_op(node, "Mul") and node.inputs[0] is d and node.inputs[1] is d


class LayerNormFusionPass(_FusionPass):
    """The decomposed LayerNorm over the last axis -> ``LayerNormalization(axis=-1)``.

    Accepts ``Pow(d, 2)`` or ``Mul(d, d)`` for the square, ``Div(d, std)`` or
    ``Mul(d, Reciprocal(std))`` for the normalisation, the duplicated ``Sub`` older PyTorch
    exporters write, and a missing ``Mul(gamma)`` / ``Add(beta)`` (gamma then becomes a
    constant of ones). The epsilon must be a constant scalar, gamma and beta 1-D of the last
    axis' length, and every intermediate value read only inside the pattern.
    """

    def __init__(self, supports: Supports, domain_below_17: str | None = None):
        super().__init__(supports)
        self.domain_below_17 = domain_below_17

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0))
        domain = ""
        if opset < 17:  # LayerNormalization is opset 17's
            if self.domain_below_17 is None:
                return ir.passes.PassResult(model, False)
            domain = self.domain_below_17
        modified = False
        for graph in graphs(model.graph):
            namer = None
            for node in list(graph):
                if node.graph is not graph or not (is_op(node, "ReduceMean") or is_op(node, "GlobalAveragePool")):
                    continue  # (a node removed by an earlier match in this walk)
                match = self._match(node) or self._match_moments(node)
                if match is None:
                    continue
                x, gamma, beta, eps, nodes, out = match
                if gamma is None:
                    namer = namer or Namer(graph)
                    gamma = initializer(graph, namer, "layernorm_scale", np.ones(_last_dim(x), _dtype(x).numpy()))
                inputs = [x, gamma] + ([beta] if beta is not None else [])
                fused = ir.Node(domain, "LayerNormalization", inputs,
                                [ir.AttrInt64("axis", -1), ir.AttrFloat32("epsilon", eps)],
                                num_outputs=1, name=f"{node.name}_layernorm", version=1 if domain else None)
                _typed_like(fused.outputs[0], out)  # the probe shows providers typed values
                if not self.claimed(fused):
                    if not gamma.uses() and gamma.name in graph.initializers and gamma.name.startswith("layernorm_scale"):
                        graph.initializers.pop(gamma.name)  # the ones made for this probe
                    continue
                replace(graph, nodes, [fused], [out], [fused.outputs[0]])
                modified = True
        if modified and domain:
            model.opset_imports.setdefault(domain, 1)
        return ir.passes.PassResult(model, modified)

    @staticmethod
    def _match(mean1: ir.Node):
        start = _mean_and_readers(mean1)
        if start is None:
            return None
        x, hidden, mean, subs = start
        if not 1 <= len(subs) <= 2 or not all(
            is_op(s, "Sub") and s.inputs[0] is x and s.inputs[1] is mean for s in subs
        ):
            return None
        centered = [s.outputs[0] for s in subs]
        if any(d.is_graph_output() for d in centered):
            return None
        readers = list(dict.fromkeys(user for d in centered for user, _ in d.uses()))
        if len(readers) != 2:  # the square, and the normalisation
            return None
        squares = [r for r in readers if any(_is_square_of(r, d) for d in centered)]
        if len(squares) != 1:
            return None
        square = squares[0]
        normalize = readers[0] if readers[1] is square else readers[1]
        found = _root_of_variance(square, x)
        if found is None:
            return None
        mean2, add_eps, sqrt, eps = found
        nodes = [mean1, *subs, square, mean2, add_eps, sqrt]
        std = sqrt.outputs[0]
        if is_op(normalize, "Div"):  # d / std
            if normalize.inputs[0] not in centered or normalize.inputs[1] is not std or not _only_use_of(std, normalize):
                return None
        elif is_op(normalize, "Mul"):  # d * (1 / std)
            recip = only_use(std)
            if not is_op(recip, "Reciprocal") or _other(normalize, recip.outputs[0]) not in centered:
                return None
            if not _only_use_of(recip.outputs[0], normalize):
                return None
            nodes.append(recip)
        else:
            return None
        nodes.append(normalize)
        out = normalize.outputs[0]
        gamma = beta = None
        mul = only_use(out)
        if is_op(mul, "Mul") and _affine_operand(_other(mul, out), x, hidden):
            gamma = _other(mul, out)
            nodes.append(mul)
            out = mul.outputs[0]
        add = only_use(out)
        if is_op(add, "Add") and _affine_operand(_other(add, out), x, hidden):
            beta = _other(add, out)
            nodes.append(add)
            out = add.outputs[0]
        if gamma is None and hidden is None:  # the ones to make need the axis' length
            return None
        return x, gamma, beta, eps, nodes, out


    @staticmethod
    def _match_moments(mean1: ir.Node):
        """Keras' LayerNormalization as tf2onnx writes it, tf.nn.moments then
        tf.nn.batch_normalization: d = x - mean, var = mean(d * d), s = Reciprocal(Sqrt(var +
        eps)) [* gamma], out = x * s + (beta - mean * s); the same function as the other form,
        with the mean subtracted after the scaling."""
        start = _mean_and_readers(mean1)
        if start is None:
            return None
        x, hidden, mean, readers = start
        if len(readers) != 2:  # x - mean, and mean * s
            return None
        centering = [r for r in readers if is_op(r, "Sub") and r.inputs[0] is x and r.inputs[1] is mean]
        if len(centering) != 1:
            return None
        sub = centering[0]
        mean_scaled = readers[0] if readers[1] is sub else readers[1]
        square = _sole_reader(sub.outputs[0])
        if square is None or not _is_square_of(square, sub.outputs[0]):
            return None
        found = _root_of_variance(square, x)
        if found is None:
            return None
        mean2, add_eps, sqrt, eps = found
        recip = only_use(sqrt.outputs[0])
        if not is_op(recip, "Reciprocal"):
            return None
        nodes = [mean1, sub, square, mean2, add_eps, sqrt, recip]
        scale = recip.outputs[0]
        gamma = None
        gamma_mul = only_use(scale)
        if is_op(gamma_mul, "Mul") and _affine_operand(_other(gamma_mul, scale), x, hidden):
            gamma = _other(gamma_mul, scale)
            nodes.append(gamma_mul)
            scale = gamma_mul.outputs[0]
        if scale.is_graph_output():
            return None
        scaling = list(dict.fromkeys(user for user, _ in scale.uses()))
        if len(scaling) != 2 or mean_scaled not in scaling:  # x * s, and mean * s
            return None
        x_scaled = scaling[0] if scaling[1] is mean_scaled else scaling[1]
        if not (is_op(mean_scaled, "Mul") and _other(mean_scaled, scale) is mean
                and is_op(x_scaled, "Mul") and _other(x_scaled, scale) is x):
            return None
        shift = only_use(mean_scaled.outputs[0])
        if not is_op(shift, "Sub") or shift.inputs[1] is not mean_scaled.outputs[0]:
            return None
        beta = shift.inputs[0]
        if not _affine_operand(beta, x, hidden):
            return None
        add = only_use(x_scaled.outputs[0])
        if not is_op(add, "Add") or _other(add, x_scaled.outputs[0]) is not shift.outputs[0] or only_use(shift.outputs[0]) is not add:
            return None
        if gamma is None and hidden is None:  # the ones to make need the axis' length
            return None
        nodes += [mean_scaled, shift, x_scaled, add]
        return x, gamma, beta, eps, nodes, add.outputs[0]


def _mean_and_readers(mean1: ir.Node) -> tuple[ir.Value, int | None, ir.Value, list[ir.Node]] | None:
    """Where ``mean1`` is the last-axis mean of a float x a LayerNorm can start from: (x, its
    last dimension, the mean, the mean's readers), else None."""
    x = mean1.inputs[0]
    if x is None or _dtype(x) not in _LN_TYPES or not _mean_over_last_axis(mean1, x, _rank(x)):
        return None
    mean = mean1.outputs[0]
    if mean.is_graph_output():
        return None
    return x, _last_dim(x), mean, list(dict.fromkeys(user for user, _ in mean.uses()))


def _root_of_variance(square: ir.Node, x: ir.Value) -> tuple[ir.Node, ir.Node, ir.Node, float] | None:
    """The chain after the centred square, in both LayerNorm forms: its mean over the last axis,
    Add of a constant epsilon (>= 0), Sqrt, each the only reader of the one before: (the mean,
    the Add, the Sqrt, epsilon), or None."""
    mean2 = only_use(square.outputs[0])
    if mean2 is None or not _mean_over_last_axis(mean2, square.outputs[0], _rank(x)):
        return None
    add_eps = only_use(mean2.outputs[0])
    if not is_op(add_eps, "Add"):
        return None
    eps = scalar(_other(add_eps, mean2.outputs[0]))
    if eps is None or eps < 0:
        return None
    sqrt = only_use(add_eps.outputs[0])
    if not is_op(sqrt, "Sqrt"):
        return None
    return mean2, add_eps, sqrt, eps


def _sole_reader(value: ir.Value) -> ir.Node | None:
    """The single node that reads ``value``, once or more (Mul(d, d)); None when several nodes
    read it or it is a graph output."""
    if value.is_graph_output():
        return None
    readers = list(dict.fromkeys(user for user, _ in value.uses()))
    return readers[0] if len(readers) == 1 else None


def _affine_operand(value: ir.Value | None, x: ir.Value, hidden: int | None) -> bool:
    """A gamma/beta LayerNormalization takes: 1-D of the last axis' length, x's type."""
    if value is None or _dtype(value) != _dtype(x):
        return False
    length = _vector_length(value)
    if hidden is None:  # a length-1 vector would broadcast in the Mul/Add, not in LayerNormalization
        return length is not None and length > 1
    return length == hidden


# --------------------------------------------------------------------------------------------
# SimplifiedLayerNormalization (RMSNorm)
# --------------------------------------------------------------------------------------------


class SimplifiedLayerNormFusionPass(_AnchoredFusionPass):
    """RMSNorm over the last axis -> ``SimplifiedLayerNormalization(x, gamma, axis=-1)``, after
    onnxruntime's SimplifiedLayerNormFusion: gamma * (x * (1 / sqrt(mean(x^2) + eps))) as T5 and
    LLaMA exporters write it (also x / sqrt(..), and Reciprocal for 1 / ..). The epsilon must be
    a constant scalar, gamma 1-D of the last axis' length in x's type, and every intermediate
    value read only inside the pattern. The CPU kernel computes x * (1 / rms) * gamma, the
    1 / x form's own operations."""

    anchors, domain = ("Pow", "Mul"), ""  # (the squares)

    def found(self, square: ir.Node) -> _Found | None:
        match = self._match(square)
        if match is None:
            return None
        x, gamma, eps, nodes, out = match
        fused = ir.Node("", "SimplifiedLayerNormalization", [x, gamma],
                        [ir.AttrInt64("axis", -1), ir.AttrFloat32("epsilon", eps), ir.AttrInt64("stash_type", 1)],
                        num_outputs=1, name=f"{square.name}_rmsnorm")
        return nodes, fused, out

    @staticmethod
    def _match(square: ir.Node):
        x = square.inputs[0]
        if x is None or _dtype(x) not in _LN_TYPES or not _is_square_of(square, x):
            return None
        found = _root_of_variance(square, x)
        if found is None:
            return None
        mean, add_eps, sqrt, eps = found
        nodes = [square, mean, add_eps, sqrt]
        rms = sqrt.outputs[0]
        first = only_use(rms)
        if is_op(first, "Div") and first.inputs[0] is x and first.inputs[1] is rms:  # x / rms
            nodes.append(first)
            normalized = first.outputs[0]
        else:  # x * (1 / rms)
            if is_op(first, "Div") and first.inputs[1] is rms and _near_one(first.inputs[0]):
                pass
            elif not is_op(first, "Reciprocal"):
                return None
            times_x = only_use(first.outputs[0])
            if not is_op(times_x, "Mul") or _other(times_x, first.outputs[0]) is not x:
                return None
            nodes += [first, times_x]
            normalized = times_x.outputs[0]
        scale = only_use(normalized)
        if not is_op(scale, "Mul"):
            return None
        gamma = _other(scale, normalized)
        if not _affine_operand(gamma, x, _last_dim(x)) or const(gamma) is None:
            return None
        nodes.append(scale)
        return x, gamma, eps, nodes, scale.outputs[0]


def _near_one(value: ir.Value | None) -> bool:
    return scalar(value) == 1.0


# --------------------------------------------------------------------------------------------
# SkipLayerNormalization
# --------------------------------------------------------------------------------------------


def _skip_acceptable(inp: ir.Value, skip: ir.Value, hidden: int) -> bool:
    """onnxruntime's rule: input 2-D or 3-D; skip of the same shape, ``[1, S, H]`` or ``[S, H]``.
    Dimensions that are unknown here may be equal; only a known mismatch rules a pair out."""
    ri, rs = _rank(inp), _rank(skip)
    if ri not in (2, 3) or rs not in (2, 3) or rs > ri:
        return False
    if _last_dim(inp) != hidden or _last_dim(skip) != hidden:
        return False
    if _differ(inp.shape[ri - 2], skip.shape[rs - 2]):
        return False
    if ri == 3 and rs == 3:
        lead_i, lead_s = _static(inp.shape[0]), _static(skip.shape[0])
        if lead_s != 1 and _differ(inp.shape[0], skip.shape[0]):
            return False
        if lead_i == 1 and lead_s != 1:  # the input would be broadcast, not the skip
            return False
    return True


def _bias_add(value: ir.Value, hidden: int, dtype: ir.DataType) -> tuple[ir.Node, ir.Value, ir.Value] | None:
    """``value`` = Add(m, bias) with a 1-D constant bias of length ``hidden``, read only by the
    outer Add: (the Add, m, bias)."""
    add = value.producer()
    if not is_op(add, "Add") or only_use(value) is None:
        return None
    for m, bias in ((add.inputs[0], add.inputs[1]), (add.inputs[1], add.inputs[0])):
        data = const(bias)
        if (data is not None and data.ndim == 1 and data.shape[0] == hidden and _dtype(bias) == dtype
                and m is not None and _last_dim(m) == hidden):
            return add, m, bias
    return None


class SkipLayerNormFusionPass(_FusionPass):
    """Add(input, skip) [+ Add(1-D constant bias)] -> LayerNormalization over the last axis ->
    com.microsoft ``SkipLayerNormalization(input, skip, gamma, beta, bias)``.

    Where the sum is also read elsewhere (the residual stream of a transformer) the fused node
    gives it as its fourth output, ``input_skip_bias_sum`` (outputs 1 and 2, the mean and the
    inverse standard deviation, are left unnamed). Run after LayerNormFusionPass.
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in graphs(model.graph):
            reordered = False
            for ln in list(graph):
                # the standard op, or ort-core's own below opset 17 (same semantics)
                if ln.graph is not graph or not (is_op(ln, "LayerNormalization") or is_op(ln, "LayerNormalization", CORE_DOMAIN)):
                    continue
                match = self._match(ln)
                if match is None:
                    continue
                inputs, nodes, total, epsilon = match
                needs_sum = total.is_graph_output() or any(user is not ln for user, _ in total.uses())
                fused = ir.Node(MS_DOMAIN, "SkipLayerNormalization", inputs, [ir.AttrFloat32("epsilon", epsilon)],
                                num_outputs=4 if needs_sum else 1, name=f"{ln.name}_skip", version=1)
                _typed_like(fused.outputs[0], ln.outputs[0])  # the probe shows providers typed values
                if needs_sum:
                    for k in (1, 2):  # mean, inv_std_var: float, as in onnxruntime's schema
                        fused.outputs[k].type = ir.TensorType(ir.DataType.FLOAT)
                    _typed_like(fused.outputs[3], total)
                if not self.claimed(fused):
                    continue
                old = [ln.outputs[0]] + ([total] if needs_sum else [])
                new = [fused.outputs[0]] + ([fused.outputs[3]] if needs_sum else [])
                replace(graph, nodes, [fused], old, new)
                if needs_sum:
                    for k in (1, 2):
                        fused.outputs[k].name = ""  # not produced for anyone
                    reordered = True
                modified = True
            if reordered:  # other readers of the sum may sit before the LayerNormalization
                graph.sort()
        if modified:
            model.opset_imports.setdefault(MS_DOMAIN, 1)
        return ir.passes.PassResult(model, modified)

    @staticmethod
    def _match(ln: ir.Node):
        x = ln.inputs[0]
        if x is None or int(attr(ln, "stash_type", 1)) != 1:
            return None
        axis = int(attr(ln, "axis", -1))
        if any(o.is_graph_output() or o.uses() for o in ln.outputs[1:]):  # mean/inv_std are read
            return None
        gamma = ln.inputs[1]
        beta = ln.inputs[2] if len(ln.inputs) > 2 else None
        hidden = _vector_length(gamma)
        if hidden is None or (beta is not None and _vector_length(beta) != hidden):
            return None
        add = x.producer()
        if not is_op(add, "Add"):
            return None
        a, b = add.inputs[0], add.inputs[1]
        if a is None or b is None:
            return None
        dtype = _dtype(ln.outputs[0]) or _dtype(a)
        if dtype not in _SLN_TYPES:
            return None
        candidates = []  # (input, skip, bias, extra nodes), the ones with a bias first
        for outer, inner in ((a, b), (b, a)):
            found = _bias_add(inner, hidden, dtype)
            if found is not None:
                bias_node, m, bias = found
                candidates += [(outer, m, bias, [bias_node]), (m, outer, bias, [bias_node])]
        candidates += [(a, b, None, []), (b, a, None, [])]
        for inp, skip, bias, extra in candidates:
            if _dtype(inp) != dtype or _dtype(skip) != dtype or not _skip_acceptable(inp, skip, hidden):
                continue
            rank = _rank(inp)  # (the sum's shape may not have been inferred; the input's is the same)
            if axis not in (-1, rank - 1):
                continue
            uses_sum_elsewhere = x.is_graph_output() or any(user is not ln for user, _ in x.uses())
            if uses_sum_elsewhere and not all(_no_producer(v) for v in (gamma, beta) if v is not None):
                continue  # gamma/beta computed after the sum is read could make a cycle
            inputs: list[ir.Value | None] = [inp, skip, gamma, beta, bias]
            while inputs[-1] is None:
                inputs.pop()
            return inputs, [*extra, add, ln], x, float(attr(ln, "epsilon", 1e-5))
        return None


def _no_producer(value: ir.Value) -> bool:
    return value.producer() is None or const(value) is not None


# --------------------------------------------------------------------------------------------
# BiasGelu
# --------------------------------------------------------------------------------------------


def _is_erf_gelu(node: ir.Node) -> bool:
    if is_op(node, "Gelu", MS_DOMAIN):
        return True
    # ONNX's own Gelu (opset 20) with the exact (erf) form is the same function
    return is_op(node, "Gelu") and str(attr(node, "approximate", "none")) == "none"


class BiasGeluFusionPass(_FusionPass):
    """Add(x, 1-D constant bias over the last axis) -> Gelu -> com.microsoft ``BiasGelu(x, bias)``
    (the bias add rides on the Gelu's first pass). Run after GeluFusionPass, whose Gelu it reads."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in graphs(model.graph):
            for gelu in list(graph):
                if gelu.graph is not graph or not _is_erf_gelu(gelu):
                    continue
                v = gelu.inputs[0]
                add = v.producer() if v is not None else None
                if not is_op(add, "Add") or only_use(v) is not gelu:
                    continue
                found = None
                for x, bias in ((add.inputs[0], add.inputs[1]), (add.inputs[1], add.inputs[0])):
                    data = const(bias)
                    if (data is not None and data.ndim == 1 and x is not None and _dtype(x) in _GELU_TYPES
                            and _dtype(bias) == _dtype(x) and _last_dim(x) == data.shape[0]):
                        found = x, bias
                        break
                if found is None:
                    continue
                fused = ir.Node(MS_DOMAIN, "BiasGelu", list(found), num_outputs=1, name=f"{gelu.name}_bias", version=1)
                modified |= self.fuse(graph, [add, gelu], fused, gelu.outputs[0])
        if modified:
            model.opset_imports.setdefault(MS_DOMAIN, 1)
        return ir.passes.PassResult(model, modified)
