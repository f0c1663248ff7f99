"""Level-1 (ORT_ENABLE_BASIC) passes: rewrites into standard ONNX ops that cannot change
results beyond floating-point rounding, whatever provider runs the graph.

Each pass walks the main graph and every subgraph and reports whether it changed anything.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper

from ._ir import Namer, attr, const, graphs, initializer, is_op, only_use, replace, scalar

logger = logging.getLogger("ort_core")

#: ops never folded: random ones (a different draw per run) and those with side effects
_NOT_FOLDABLE = {
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
    "Bernoulli", "Dropout", "If", "Loop", "Scan", "SequenceMap",
}
#: folded outputs bigger than this many elements stay computed (ORT keeps big Expand/Tile too)
FOLD_LIMIT = 1 << 20


class DropoutEliminationPass(ir.passes.InPlacePass):
    """Dropout in inference (no training_mode, or a constant False one; mask unused) is Identity:
    its readers read its input directly."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in graphs(model.graph):
            for node in list(graph):
                if not is_op(node, "Dropout"):
                    continue
                if len(node.outputs) > 1 and (node.outputs[1].uses() or node.outputs[1].is_graph_output()):
                    continue
                if len(node.inputs) > 2 and node.inputs[2] is not None:
                    training = const(node.inputs[2])
                    if training is None or bool(training.reshape(())):
                        continue
                out, src = node.outputs[0], node.inputs[0]
                if out.is_graph_output():
                    continue  # keep the output's name; Identity elimination handles what it can
                ir.convenience.replace_all_uses_with(out, src)
                graph.remove(node, safe=True)
                modified = True
        return ir.passes.PassResult(model, modified)


class IdentityEliminationPass(ir.passes.InPlacePass):
    """Identity nodes are removed, their readers read the input directly. An Identity whose
    output is a graph output stays (the output keeps its name; in a control-flow body the input
    may be an outer-scope value, which cannot be a body output)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in graphs(model.graph):
            for node in list(graph):
                if not is_op(node, "Identity") or node.outputs[0].is_graph_output():
                    continue
                ir.convenience.replace_all_uses_with(node.outputs[0], node.inputs[0])
                graph.remove(node, safe=True)
                modified = True
        return ir.passes.PassResult(model, modified)


def _evaluate(node: ir.Node, inputs: list[np.ndarray | None], opsets: dict[str, int]) -> list[np.ndarray]:
    """Run one node with onnx's reference evaluator."""
    from onnx.reference import ReferenceEvaluator

    proto = ir.serde.serialize_node(node)
    names = [f"in{k}" if v is not None else "" for k, v in enumerate(inputs)]
    del proto.input[:]
    proto.input.extend(names)
    outs = [f"out{k}" if o.name else "" for k, o in enumerate(node.outputs)]
    del proto.output[:]
    proto.output.extend(outs)
    graph = helper.make_graph(
        [proto], "fold",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for n, v in zip(names, inputs) if n],
        [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in outs if n],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
    feeds = {n: v for n, v in zip(names, inputs) if n}
    return ReferenceEvaluator(model).run(None, feeds)


class ConstantFoldingPass(ir.passes.InPlacePass):
    """Nodes of the standard domain whose inputs are all constants become initializers
    (evaluated once with ``onnx.reference``). Random ops, control flow and outputs bigger than
    ``FOLD_LIMIT`` elements are left alone; a node the evaluator cannot run is left alone."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        opsets = dict(model.opset_imports)
        modified = False
        for graph in graphs(model.graph):
            namer = None
            for node in list(graph):
                if node.domain not in ("", "ai.onnx") or node.op_type in _NOT_FOLDABLE:
                    continue
                if node.op_type == "Constant" or not node.inputs:
                    continue
                if any(o.is_graph_output() for o in node.outputs):
                    continue
                inputs = [None if v is None else const(v) for v in node.inputs]
                if any(v is None and i is not None for v, i in zip(inputs, node.inputs)):
                    continue
                try:
                    results = _evaluate(node, inputs, opsets)
                except Exception as exc:  # unsupported by the evaluator: keep the node
                    logger.debug("constant folding skipped %s (%s): %s", node.name, node.op_type, exc)
                    continue
                if not all(isinstance(r, (np.ndarray, np.generic)) for r in results):
                    continue  # a sequence (list) or an optional (None) is no tensor initializer
                if any(np.asarray(r).size > FOLD_LIMIT for r in results):
                    continue
                namer = namer or Namer(graph)
                new_values = []
                named = [o for o in node.outputs if o.name]
                for out, data in zip(named, results):
                    data = np.asarray(data)
                    new_values.append(initializer(graph, namer, f"{out.name}_folded", data))
                for out, new in zip(named, new_values):
                    ir.convenience.replace_all_uses_with(out, new)
                graph.remove(node, safe=True)
                modified = True
        return ir.passes.PassResult(model, modified)


class ShapeFoldingPass(ir.passes.InPlacePass):
    """``Shape`` of a value whose shape is known (after shape inference) becomes a constant;
    so does ``Shape -> Gather(constant index)`` when the gathered dimensions are known, which
    lets constant folding take the Concat/Reshape chains that follow."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in graphs(model.graph):
            namer = Namer(graph)
            for node in list(graph):
                if not is_op(node, "Shape") or node.outputs[0].is_graph_output():
                    continue
                shape = node.inputs[0].shape
                if shape is None:
                    continue
                dims = [d if isinstance(d, int) else None for d in shape]
                rank = len(dims)
                start = attr(node, "start", 0)
                end = attr(node, "end", rank)
                start = max(0, min(rank, start + rank if start < 0 else start))
                end = max(0, min(rank, end + rank if end < 0 else end))
                dims = dims[start:end]
                out = node.outputs[0]
                if all(d is not None for d in dims):
                    value = initializer(graph, namer, f"{out.name}_folded", np.array(dims, np.int64))
                    ir.convenience.replace_all_uses_with(out, value)
                    graph.remove(node, safe=True)
                    modified = True
                    continue
                for reader, _ in list(out.uses()):  # Shape -> Gather of known dimensions
                    if not is_op(reader, "Gather") or reader.inputs[0] is not out:
                        continue
                    index = const(reader.inputs[1])
                    if index is None or reader.outputs[0].is_graph_output():
                        continue
                    picked = np.take(np.array([-1 if d is None else d for d in dims], np.int64), index)
                    if np.any(picked < 0):
                        continue
                    value = initializer(graph, namer, f"{reader.outputs[0].name}_folded", picked.astype(np.int64))
                    ir.convenience.replace_all_uses_with(reader.outputs[0], value)
                    graph.remove(reader, safe=True)
                    modified = True
                if not out.uses():
                    graph.remove(node, safe=True)
        return ir.passes.PassResult(model, modified)


def _conv_output_rank(conv: ir.Node) -> int | None:
    w = const(conv.inputs[1]) if len(conv.inputs) > 1 else None
    return None if w is None else w.ndim


class ConvBatchNormFoldPass(ir.passes.InPlacePass):
    """Conv (constant weights) followed by inference BatchNormalization becomes one Conv with
    scaled weights and a shifted bias."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in graphs(model.graph):
            namer = None
            for conv in list(graph):
                if not is_op(conv, "Conv"):
                    continue
                bn = only_use(conv.outputs[0])
                if not is_op(bn, "BatchNormalization") or bn.inputs[0] is not conv.outputs[0]:
                    continue
                if attr(bn, "training_mode", 0) or any(o.uses() or o.is_graph_output() for o in bn.outputs[1:]):
                    continue
                w = const(conv.inputs[1])
                b = const(conv.inputs[2]) if len(conv.inputs) > 2 and conv.inputs[2] is not None else None
                params = [const(v) for v in bn.inputs[1:5]]
                if w is None or any(p is None for p in params) or w.dtype.kind != "f":
                    continue
                if len(conv.inputs) > 2 and conv.inputs[2] is not None and b is None:
                    continue
                scale, shift, mean, var = (p.astype(np.float64).reshape(-1) for p in params)
                eps = float(attr(bn, "epsilon", 1e-5))
                factor = scale / np.sqrt(var + eps)
                new_w = (w.astype(np.float64) * factor.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
                base = b.astype(np.float64) if b is not None else 0.0
                new_b = ((base - mean) * factor + shift).astype(w.dtype)
                namer = namer or Namer(graph)
                w_value = initializer(graph, namer, f"{conv.name or 'conv'}_W_bn", new_w)
                b_value = initializer(graph, namer, f"{conv.name or 'conv'}_B_bn", new_b)
                fused = ir.Node("", "Conv", [conv.inputs[0], w_value, b_value], conv.attributes.values(),
                                num_outputs=1, name=conv.name)
                replace(graph, [conv, bn], [fused], [bn.outputs[0]], [fused.outputs[0]])
                modified = True
        return ir.passes.PassResult(model, modified)


def _conv_then(graph: ir.Graph, op_type: str):
    """Each Conv with constant weights whose only reader is an ``op_type`` node, as
    (conv, that node, the node's other operand as a constant or None, the weights)."""
    for conv in list(graph):
        if not is_op(conv, "Conv"):
            continue
        follower = only_use(conv.outputs[0])
        if not is_op(follower, op_type):
            continue
        w = const(conv.inputs[1])
        if w is None:
            continue
        other = follower.inputs[1] if follower.inputs[0] is conv.outputs[0] else follower.inputs[0]
        yield conv, follower, const(other), w


class ConvAddFoldPass(ir.passes.InPlacePass):
    """Conv followed by Add of a constant per-output-channel vector: the vector joins the bias."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in graphs(model.graph):
            namer = None
            for conv, add, other, w in _conv_then(graph, "Add"):
                m = w.shape[0]
                c = _per_channel(other, _conv_output_rank(conv), m)
                if c is None or c.dtype != w.dtype:
                    continue
                has_b = len(conv.inputs) > 2 and conv.inputs[2] is not None
                b = const(conv.inputs[2]) if has_b else np.zeros(m, w.dtype)
                if b is None:
                    continue
                namer = namer or Namer(graph)
                b_value = initializer(graph, namer, f"{conv.name or 'conv'}_B_add", (b + c.reshape(m)).astype(w.dtype))
                fused = ir.Node("", "Conv", [conv.inputs[0], conv.inputs[1], b_value], conv.attributes.values(),
                                num_outputs=1, name=conv.name)
                replace(graph, [conv, add], [fused], [add.outputs[0]], [fused.outputs[0]])
                modified = True
        return ir.passes.PassResult(model, modified)


def _per_channel(c: np.ndarray | None, rank: int | None, m: int) -> np.ndarray | None:
    """``c`` as an (M,) vector if it broadcasts over a Conv output (N, M, ...) per channel."""
    if c is None or rank is None or c.ndim > rank:
        return None
    full = (1,) * (rank - c.ndim) + c.shape
    if full[1] not in (1, m) or any(d != 1 for i, d in enumerate(full) if i != 1):
        return None
    return np.broadcast_to(c.reshape(-1), (m,))


class ConvMulFoldPass(ir.passes.InPlacePass):
    """Conv followed by Mul by a constant scalar or per-output-channel vector: the factor is
    folded into the weights and bias (exporters write BatchNorm's affine part this way)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in graphs(model.graph):
            namer = None
            for conv, mul, other, w in _conv_then(graph, "Mul"):
                if w.dtype.kind != "f":
                    continue
                factor = _per_channel(other, w.ndim, w.shape[0])
                if factor is None or factor.dtype != w.dtype:
                    continue
                has_b = len(conv.inputs) > 2 and conv.inputs[2] is not None
                b = const(conv.inputs[2]) if has_b else None
                if has_b and b is None:
                    continue
                namer = namer or Namer(graph)
                new_w = (w.astype(np.float64) * factor.astype(np.float64).reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
                inputs = [conv.inputs[0], initializer(graph, namer, f"{conv.name or 'conv'}_W_mul", new_w)]
                if has_b:
                    inputs.append(initializer(graph, namer, f"{conv.name or 'conv'}_B_mul",
                                              (b.astype(np.float64) * factor).astype(w.dtype)))
                fused = ir.Node("", "Conv", inputs, conv.attributes.values(), num_outputs=1, name=conv.name)
                replace(graph, [conv, mul], [fused], [mul.outputs[0]], [fused.outputs[0]])
                modified = True
        return ir.passes.PassResult(model, modified)


class MatMulAddToGemmPass(ir.passes.InPlacePass):
    """MatMul of a rank-2 input by a constant matrix followed by Add of a constant bias that
    broadcasts over the rows becomes Gemm (one BLAS call with the bias, no extra pass)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in graphs(model.graph):
            for mm in list(graph):
                if not is_op(mm, "MatMul"):
                    continue
                a, b = mm.inputs
                b_data = const(b)
                if a.shape is None or len(a.shape) != 2 or b_data is None or b_data.ndim != 2:
                    continue
                add = only_use(mm.outputs[0])
                if not is_op(add, "Add"):
                    continue
                other = add.inputs[1] if add.inputs[0] is mm.outputs[0] else add.inputs[0]
                c = const(other)
                n = b_data.shape[1]
                if c is None or c.ndim > 2 or c.dtype != b_data.dtype or c.shape[-1:] not in ((n,), (1,), ()):
                    continue
                if c.ndim == 2 and c.shape[0] != 1:
                    continue
                gemm = ir.Node("", "Gemm", [a, b, other], num_outputs=1, name=mm.name)
                replace(graph, [mm, add], [gemm], [add.outputs[0]], [gemm.outputs[0]])
                modified = True
        return ir.passes.PassResult(model, modified)


def _clip_bounds(clip: ir.Node) -> tuple[float | None, float | None]:
    if "min" in clip.attributes or "max" in clip.attributes:  # opset < 11
        return attr(clip, "min"), attr(clip, "max")
    bounds = []
    for k in (1, 2):
        bounds.append(scalar(clip.inputs[k]) if len(clip.inputs) > k and clip.inputs[k] is not None else None)
    return bounds[0], bounds[1]


def _close(value: float | None, target: float) -> bool:
    return value is not None and abs(value - target) <= 1e-5 * max(1.0, abs(target))


class HardSwishRewritePass(ir.passes.InPlacePass):
    """x * Clip(x + 3, 0, 6) / 6 (hard-swish as exporters write it before opset 14) becomes
    x * HardSigmoid(x, alpha=1/6, beta=0.5): two nodes instead of four, standard since opset 6."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in graphs(model.graph):
            for clip in list(graph):
                if not is_op(clip, "Clip"):
                    continue
                add = clip.inputs[0].producer()
                if not is_op(add, "Add") or only_use(add.outputs[0]) is not clip:
                    continue
                if _close(scalar(add.inputs[1]), 3.0):
                    x = add.inputs[0]
                elif _close(scalar(add.inputs[0]), 3.0):
                    x = add.inputs[1]
                else:
                    continue
                low, high = _clip_bounds(clip)
                if not (_close(low, 0.0) and _close(high, 6.0)):
                    continue
                mul = only_use(clip.outputs[0])
                if not is_op(mul, "Mul") or x not in mul.inputs:
                    continue
                last = only_use(mul.outputs[0])
                if is_op(last, "Div") and last.inputs[0] is mul.outputs[0] and _close(scalar(last.inputs[1]), 6.0):
                    pass
                elif is_op(last, "Mul") and _close(scalar(last.inputs[1] if last.inputs[0] is mul.outputs[0] else last.inputs[0]), 1 / 6):
                    pass
                else:
                    continue
                if x.type is not None and x.dtype not in (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16):
                    continue
                hs = ir.Node("", "HardSigmoid", [x], [ir.AttrFloat32("alpha", 1 / 6), ir.AttrFloat32("beta", 0.5)],
                             num_outputs=1, name=f"{clip.name}_hardsigmoid")
                hs.outputs[0].type, hs.outputs[0].shape = x.type, x.shape  # providers check types
                product = ir.Node("", "Mul", [x, hs.outputs[0]], num_outputs=1, name=f"{mul.name}_hardswish")
                replace(graph, [add, clip, mul, last], [hs, product], [last.outputs[0]], [product.outputs[0]])
                modified = True
        return ir.passes.PassResult(model, modified)


class ShapeInferenceQuietPass(ir.passes.InPlacePass):
    """onnx shape inference (so that shape folding knows shapes); a model it cannot infer is
    left as it is."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        from onnx_ir.passes.common import ShapeInferencePass

        if any(v.type is None for v in model.graph.inputs):
            # onnx's C++ inference can crash (not raise) on an untyped input, e.g. a map-typed
            # one, which onnx-ir cannot represent (DictVectorizer's input)
            return ir.passes.PassResult(model, False)
        try:
            return ShapeInferencePass(strict_mode=False)(model)
        except Exception as exc:
            logger.debug("shape inference skipped: %s", exc)
            return ir.passes.PassResult(model, False)
