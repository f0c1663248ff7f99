"""Level-1 (ORT_ENABLE_BASIC) passes: rewrites into standard ONNX ops that cannot change
results beyond floating-point rounding, whatever provider runs the graph.

Each pass walks the main graph and every subgraph and reports whether it changed anything.
"""

from __future__ import annotations

import functools
import logging

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper

from ..graph.load import INFERENCE_DATA_LIMIT, SHAPES_INFERRED
from ..sizes import GROWING, output_elements
from . import _fold
from ._ir import Namer, attr, const, graphs, initializer, is_op, only_use, replace

logger = logging.getLogger("ort_core")

#: ops never folded: random ones (a different draw per run) and those with side effects; and
#: DequantizeLinear, as onnxruntime's constant folding skips it by default: a QDQ model's
#: quantized weights must stay quantized for the providers that run its QDQ units in integer
#: (folded, an NPU provider sees only float weights)
_NOT_FOLDABLE = {
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
    "Bernoulli", "Dropout", "If", "Loop", "Scan", "SequenceMap", "DequantizeLinear",
}
#: folded outputs bigger than this many elements stay computed, except for the ops of
#: ``BULK_FOLDABLE``: onnx.reference runs the others' loops in Python (a Conv, a Resize, a pool
#: of millions of outputs would take minutes to fold)
FOLD_LIMIT = 1 << 20
#: ops evaluated by a few whole-array numpy calls (``_fold``'s, or onnx.reference's), folded up
#: to ``max_bytes`` whatever their size, as onnxruntime folds them (its ConstantOfShape, Expand
#: and Tile of 2M elements are folded; caffe2-era models build their weights with
#: ConstantOfShape: an AlexNet's 151 MB of them ran at every call, 11 ms of 38)
BULK_FOLDABLE = frozenset({
    "ConstantOfShape", "Expand", "Tile", "Cast", "Reshape", "Transpose", "Concat", "Slice", "Gather",
    "Squeeze", "Unsqueeze", "Flatten", "Identity", "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Sqrt",
    "Reciprocal", "Exp", "Log", "Pow", "Where", "Equal", "Less", "Greater", "Not", "And", "Or",
    "MatMul", "Gemm",
})
#: default of ``session.max_fold_bytes``: no node is folded whose outputs would take more bytes
#: (onnxruntime's default limit on a constant-folded node's output, 1 GiB, since 1.27)
MAX_FOLD_BYTES = 1 << 30
#: ops whose output can be far bigger than their inputs: folded only when the output's size is
#: known before evaluating them (from shape inference or from their constant inputs)
_GROWING = GROWING


def _fold_estimate(node: ir.Node, inputs: list[np.ndarray | None]) -> tuple[int, int] | None:
    """(elements, bytes) the node's outputs would take, from their inferred shapes or, for the
    ops that make big outputs from small inputs, from the constant inputs; None if unknown.
    Asked before evaluating: materialising a [10^9] ConstantOfShape to find it too big took
    72 s and 11 GB."""
    elements = nbytes = 0
    for out in node.outputs:
        shape, dtype = out.shape, out.dtype
        if shape is not None and dtype is not None and all(isinstance(d, int) and d >= 0 for d in shape):
            n = int(np.prod([int(d) for d in shape], dtype=object))
            elements, nbytes = elements + n, nbytes + n * max(1, dtype.itemsize)
            continue
        n = _output_elements(node, inputs)
        if n is None:
            return None
        elements, nbytes = elements + n, nbytes + n * 8  # element type unknown: the widest
    return elements, nbytes


def _output_elements(node: ir.Node, inputs: list[np.ndarray | None]) -> int | None:
    """Elements of the node's output from its constant inputs (``ort_core.sizes``, the estimator
    the CPU provider's ``max_mem`` limit asks at run time too)."""

    def attribute(name: str):
        a = node.attributes.get(name)
        return None if a is None else a.value

    return output_elements(node.op_type, inputs, attribute)


class LiftConstantsPass(ir.passes.InPlacePass):
    """Constant nodes become initializers named as their outputs (all of them, whatever their
    size or attribute kind), as onnx-ir's ``LiftConstantsToInitializersPass(lift_all_constants=
    True, size_limit=0)`` does; a Constant whose output is a graph output, or with other than
    one attribute, stays. Written here because onnx-ir's pass checks each tensor against a
    runtime protocol, which costs ~0.1 ms per Constant on Python 3.11 (a third of creation for
    models with hundreds of Constants)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        count = 0
        for graph in graphs(model.graph):
            lifted = []
            for node in graph:
                # (onnx-ir's test, kept as it is: the domain "ai.onnx" is normalised to "" already)
                if node.op_type != "Constant" or node.domain not in ("", "onnx.ai"):
                    continue
                out = node.outputs[0]
                if out.is_graph_output() or len(node.attributes) != 1:
                    continue
                (attr_name, attr_value), = node.attributes.items()
                tensor = _constant_tensor(attr_name, attr_value, out.name)
                value = ir.Value(name=out.name, shape=tensor.shape, type=ir.TensorType(tensor.dtype),
                                 const_value=tensor, metadata_props=out.metadata_props.copy())
                value.meta.update(out.meta)
                graph.register_initializer(value)
                out.replace_all_uses_with(value)
                lifted.append(node)
            # removed together: each call checks the graph's outputs anew (a tenth of the pass
            # on a model with a thousand Constants)
            if lifted:
                graph.remove(lifted, safe=True)
                count += len(lifted)
        return ir.passes.PassResult(model, bool(count))


#: onnx-ir's tensor classes: an isinstance test against them is what ``Attr.as_tensor``'s
#: protocol test answers for them, at a fraction of the cost
_TENSOR_CLASSES = (ir.Tensor, ir.serde.TensorProtoTensor, ir.ExternalTensor, ir.StringTensor, ir.LazyTensor,
                   ir.PackedTensor)


def _constant_tensor(attr_name: str, attr_value: ir.Attr, name: str | None) -> ir.TensorProtocol:
    """The tensor a Constant node's one attribute holds."""
    if attr_name == "value":
        if attr_value.type == ir.AttributeType.TENSOR and isinstance(attr_value.value, _TENSOR_CLASSES):
            return attr_value.value
        return attr_value.as_tensor()  # the library's own (protocol) check and error message
    if attr_name == "value_int":
        return ir.tensor(attr_value.as_int(), dtype=ir.DataType.INT64, name=name)
    if attr_name == "value_ints":
        return ir.tensor(attr_value.as_ints(), dtype=ir.DataType.INT64, name=name)
    if attr_name == "value_float":
        return ir.tensor(attr_value.as_float(), dtype=ir.DataType.FLOAT, name=name)
    if attr_name == "value_floats":
        return ir.tensor(attr_value.as_floats(), dtype=ir.DataType.FLOAT, name=name)
    if attr_name in ("value_string", "value_strings"):
        return ir.StringTensor(np.array(attr_value.value, dtype=np.bytes_), name=name)
    raise ValueError(f"Constant node: unsupported attribute {attr_name!r}")


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


class CastEliminationPass(ir.passes.InPlacePass):
    """A Cast to the type its input already has is removed, its readers read the input directly
    (onnxruntime's CastElimination, at BASIC). Exporters write them: a converted TensorFlow
    ResNet-50 casts float32 to float32 around every bias and batch norm, 309 Casts. A Cast whose
    output is a graph output stays, as an Identity would."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in graphs(model.graph):
            for node in list(graph):
                if not is_op(node, "Cast") or node.outputs[0].is_graph_output():
                    continue
                source = node.inputs[0]
                to = attr(node, "to")
                if source is None or source.dtype is None or not isinstance(to, int) or to != source.dtype.value:
                    continue
                ir.convenience.replace_all_uses_with(node.outputs[0], source)
                graph.remove(node, safe=True)
                modified = True
        return ir.passes.PassResult(model, modified)


#: elementwise ops a Transpose is moved past: unary ones, and binary ones whose other operand is
#: a constant (transposed to match) or the same Transpose of another value
_PUSH_UNARY = frozenset({"Relu", "Sigmoid", "Tanh", "LeakyRelu", "Neg", "Abs", "Sqrt", "Exp", "Log",
                         "Erf", "Elu", "Selu", "Softplus", "HardSigmoid", "HardSwish", "Reciprocal"})
_PUSH_BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min"})


def _perm(node: ir.Node, rank: int | None) -> list[int] | None:
    perm = attr(node, "perm")
    if perm is not None:
        return [int(v) for v in perm]
    return None if rank is None else list(range(rank))[::-1]


class TransposePushPass(ir.passes.InPlacePass):
    """Transposes moved down past elementwise ops, then cancelled (after onnxruntime's transpose
    optimizer): op(Transpose(x, p), c) is Transpose(op(x, c'), p) for a unary elementwise op, a
    binary one with a constant c (c' is c transposed back: the same values in the same
    operations, so the same bits) or with the same Transpose of another value on its other
    side; two Transposes in a row become one, or none where they undo each other. Converted
    TensorFlow models wrap every NCHW Conv in Transposes to and from NHWC with the bias, batch
    norm and activation in between; moved, those meet the Conv, where the folds and fusions
    take them, and the Transposes meet and cancel."""

    #: sweeps over a graph at most (a Transpose moves one op a sweep; a longer chain keeps the rest)
    MOST_SWEEPS = 16
    #: constant operands of at most this many elements are transposed (per-channel vectors and
    #: scalars; a large one would be copied)
    MOST_CONSTANT_ELEMENTS = 1 << 16

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in graphs(model.graph):
            namer = None
            for _ in range(self.MOST_SWEEPS):
                changed = False
                for node in list(graph):
                    if node.graph is not graph or not is_op(node, "Transpose"):
                        continue
                    if self._cancel(graph, node):
                        changed = True
                        continue
                    namer = namer or Namer(graph)  # (made once a graph: it reads every name)
                    changed |= self._push(graph, node, namer)
                if not changed:
                    break
                modified = True
        return ir.passes.PassResult(model, modified)

    @staticmethod
    def _cancel(graph: ir.Graph, outer: ir.Node) -> bool:
        """Transpose(Transpose(x, p), q) -> Transpose(x, p[q]), or x where that is no change."""
        inner = outer.inputs[0].producer() if outer.inputs[0] is not None else None
        if not is_op(inner, "Transpose") or only_use(inner.outputs[0]) is not outer:
            return False
        x = inner.inputs[0]
        rank = None if x.shape is None else x.shape.rank()
        p, q = _perm(inner, rank), _perm(outer, rank)
        if p is None or q is None or len(p) != len(q):
            return False
        combined = [p[i] for i in q]
        out = outer.outputs[0]
        if combined == list(range(len(combined))):
            if out.is_graph_output():
                return False
            ir.convenience.replace_all_uses_with(out, x)
            graph.remove([outer, inner], safe=True)
            return True
        merged = ir.Node("", "Transpose", [x], [ir.AttrInt64s("perm", combined)], num_outputs=1, name=outer.name)
        replace(graph, [inner, outer], [merged], [out], [merged.outputs[0]])
        return True

    def _push(self, graph: ir.Graph, transpose: ir.Node, namer: Namer) -> bool:
        t_out = transpose.outputs[0]
        op = only_use(t_out)
        x = transpose.inputs[0]
        if op is None or x is None or op.domain not in ("", "ai.onnx") or x.shape is None:
            return False
        rank = x.shape.rank()
        p = _perm(transpose, rank)
        if p is None or sorted(p) != list(range(rank)):
            return False
        inverse = [p.index(i) for i in range(rank)]
        if op.op_type in _PUSH_UNARY and len(op.inputs) == 1:
            inputs = [x]
        elif op.op_type in _PUSH_BINARY and len(op.inputs) == 2:
            inputs = []
            for value in op.inputs:
                if value is t_out:
                    inputs.append(x)
                    continue
                producer = value.producer() if value is not None else None
                if (is_op(producer, "Transpose") and only_use(value) is op and producer.inputs[0] is not None
                        and producer.inputs[0].shape is not None and producer.inputs[0].shape.rank() == rank
                        and _perm(producer, rank) == p):
                    inputs.append(producer.inputs[0])  # the same Transpose on both sides
                    continue
                c = const(value)
                if c is None or c.ndim > rank or c.size > self.MOST_CONSTANT_ELEMENTS:
                    return False
                c_back = np.ascontiguousarray(c.reshape((1,) * (rank - c.ndim) + c.shape).transpose(inverse))
                inputs.append(initializer(graph, namer, f"{value.name or 'constant'}_transposed", c_back))
        else:
            return False
        out = op.outputs[0]
        moved = ir.Node("", op.op_type, inputs, op.attributes.values(), num_outputs=1, name=op.name)
        moved.outputs[0].type = out.type
        if out.shape is not None and out.shape.rank() == rank:
            moved.outputs[0].shape = ir.Shape([out.shape[inverse[i]] for i in range(rank)])
        after = ir.Node("", "Transpose", [moved.outputs[0]], [ir.AttrInt64s("perm", p)], num_outputs=1,
                        name=transpose.name)
        olds = [transpose, op] + [v.producer() for v in op.inputs
                                  if v is not t_out and v is not None and is_op(v.producer(), "Transpose")]
        replace(graph, olds, [moved, after], [out], [after.outputs[0]])
        return True


class LoopInvariantCarriedPass(ir.passes.InPlacePass):
    """A Loop-carried value that the body passes on unchanged is its initial value in every
    iteration: the body's nodes read the initial value itself. Exporters carry weights and the
    encoder's output this way (paddle2onnx's attention decoders: a table model's Loop carries
    its ten linear weights and the encoder features). A kernel that knows its weights are
    constant prepares them once (oneDNN's packed products) instead of every iteration, and a
    node that reads only such values is loop-invariant (``LoopInvariantHoistPass``). The
    carried slot stays, so the Loop's outputs are unchanged.

    "Unchanged": the body output is the body input, or reaches it through no-op steps only
    (``_passed_on``): Identity, an Unsqueeze undone by a Squeeze of the same axes, and adding
    or subtracting zero, multiplying or dividing by one (paddle2onnx writes
    Squeeze(Add(Unsqueeze(x), 0))). Adding zero turns -0.0 into +0.0; the body then reads the
    initial value's -0.0 where it read +0.0, as onnxruntime's NoopElimination makes it read."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in graphs(model.graph):
            for node in graph:
                if not is_op(node, "Loop") or "body" not in node.attributes:
                    continue
                body = node.attributes["body"].as_graph()
                carried = len(node.inputs) - 2
                if len(body.inputs) != carried + 2 or len(body.outputs) < carried + 1:
                    continue
                for i in range(carried):
                    inside, initial = body.inputs[2 + i], node.inputs[2 + i]
                    chain = _passed_on(body.outputs[1 + i], inside) if initial is not None else None
                    if chain is None:
                        continue
                    users = [(user, index) for user, index in inside.uses() if user not in chain]
                    for user, index in users:  # (the body output stays: it is the slot)
                        user.replace_input_with(index, initial)
                    modified = modified or bool(users)
        return ir.passes.PassResult(model, modified)


#: no-op steps a carried value may take through a Loop body and stay the same (see
#: ``LoopInvariantCarriedPass``): op -> the neutral constant of its second input
_NEUTRAL = {"Add": 0, "Sub": 0, "Mul": 1, "Div": 1}


def _passed_on(value: ir.Value, inside: ir.Value) -> list[ir.Node] | None:
    """The no-op steps (last first; none where it is the same value) by which the body output
    ``value`` is made from the body input ``inside``, or None where it is not made so
    (``LoopInvariantCarriedPass``)."""
    steps: list[ir.Node] = []
    while value is not inside:
        node = value.producer()
        if node is None or len(steps) > 8 or not node.inputs or node.inputs[0] is None:
            return None
        if not (is_op(node, "Identity") or is_op(node, "Squeeze") or is_op(node, "Unsqueeze")
                or (node.op_type in _NEUTRAL and node.domain in ("", "ai.onnx") and len(node.inputs) == 2)):
            return None
        steps.append(node)
        value = node.inputs[0]
    rank = len(inside.shape) if inside.shape is not None else None
    pending: list[int] | None = None  # the axes of an Unsqueeze the next step must undo
    for node in reversed(steps):
        if node.op_type == "Identity":
            continue
        if node.op_type in ("Unsqueeze", "Squeeze"):
            axes = _axes(node)
            if axes is None or rank is None and any(a < 0 for a in axes):
                return None
            if node.op_type == "Unsqueeze":
                if pending is not None:
                    return None
                out_rank = None if rank is None else rank + len(axes)
                pending = sorted(a + out_rank if a < 0 else a for a in axes)
                rank = out_rank
            else:
                if pending is None or sorted(a + rank if a < 0 else a for a in axes) != pending:
                    return None
                pending = None
                rank = None if rank is None else rank - len(axes)
            continue
        c = const(node.inputs[1])
        if c is None or c.size != 1 or c.reshape(-1)[0] != _NEUTRAL[node.op_type]:
            return None
        if c.ndim and (rank is None or c.ndim > rank):
            return None  # the constant's dims would broadcast the value to a higher rank
    return steps if pending is None else None


def _axes(node: ir.Node) -> list[int] | None:
    """A Squeeze's or Unsqueeze's constant axes (input from opset 13, else attribute)."""
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        a = const(node.inputs[1])
        return None if a is None else [int(v) for v in a.reshape(-1)]
    axes = attr(node, "axes")
    return None if axes is None else [int(v) for v in axes]


#: domains whose ops are pure functions of their inputs (custom domains may keep state)
_PURE_DOMAINS = {"", "ai.onnx", "com.microsoft"}


class LoopInvariantHoistPass(ir.passes.InPlacePass):
    """Loop-invariant code motion: a Loop body's node whose inputs are all the same in every
    iteration (values of the enclosing graphs, constants, or outputs of such nodes) runs once,
    before the Loop, instead of once per iteration. Autoregressive decoders written as a Loop
    recompute projections of the encoder's output at every step (a table model's attention
    decoder: a (256, 96) @ (96, 256) product, 52 us, in each of 501 iterations).

    Left in the body: random ops (a new draw per iteration), ops of custom domains (they may
    keep state), nodes with subgraphs of their own, and nodes whose outputs are body outputs.
    A hoisted node also runs when the Loop takes no iteration: a cost (never a different
    result) for such a run. Its outputs are renamed to names no scope uses (a sibling scope's
    name may be the same), and the body's initializers it reads move to the enclosing graph."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        namer = None
        for graph in list(graphs(model.graph)):
            for loop in list(graph):
                if not is_op(loop, "Loop") or "body" not in loop.attributes:
                    continue
                body = loop.attributes["body"].as_graph()
                hoisted = _invariant_nodes(body)
                if not hoisted:
                    continue
                namer = namer or Namer(model.graph)
                for node in hoisted:
                    for value in node.inputs:
                        if value is not None and value.name in body.initializers and body.initializers[value.name] is value:
                            body.initializers.pop(value.name)
                            value.name = namer(value.name or "hoisted")
                            graph.register_initializer(value)
                    body.remove(node, safe=False)
                    for value in node.outputs:
                        if value.name:
                            value.name = namer(value.name)
                    graph.insert_before(loop, node)
                modified = True
        return ir.passes.PassResult(model, modified)


def _invariant_nodes(body: ir.Graph) -> list[ir.Node]:
    """The nodes of a Loop body, in order, that compute the same in every iteration."""
    inside = {id(v) for v in body.inputs}
    found: list[ir.Node] = []
    outputs = {id(v) for v in body.outputs}
    for node in body:
        invariant = (
            node.domain in _PURE_DOMAINS
            and node.op_type not in _NOT_FOLDABLE
            and not any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values())
            and not any(id(v) in outputs for v in node.outputs)
            and all(v is None or id(v) not in inside for v in node.inputs)
        )
        if invariant:
            found.append(node)
        else:
            inside.update(id(v) for v in node.outputs)
    return found


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


def _constant_inputs(node: ir.Node) -> list[np.ndarray | None] | None:
    """The node's inputs as arrays if all are constants, else None. Whether each is a constant
    is asked first: reading a big weight into an array only to find the node's other input is
    computed was most of this pass's time."""
    for v in node.inputs:
        if v is not None and (v.is_graph_input() or ir.convenience.get_const_tensor(v) is None):
            return None
    inputs = [None if v is None else const(v) for v in node.inputs]
    if any(x is None and v is not None for x, v in zip(inputs, node.inputs)):
        return None
    return inputs


class ConstantFoldingPass(ir.passes.InPlacePass):
    """Nodes of the standard domain whose inputs are all constants become initializers
    (evaluated once with ``onnx.reference``, or for the common shape-arithmetic ops with the
    same numpy calls directly, see ``_fold``). Random ops, control flow and outputs bigger than
    ``max_bytes`` bytes, or ``FOLD_LIMIT`` elements but for ``BULK_FOLDABLE``'s ops, are left
    alone, the size estimated before
    the node is evaluated (``_fold_estimate``; a node whose size is unknown is folded only if
    it is not one of the ops that grow); a node the evaluator cannot run is left alone."""

    def __init__(self, max_bytes: int = MAX_FOLD_BYTES):
        super().__init__()
        self.max_bytes = max_bytes

    def _too_big(self, node: ir.Node, inputs: list[np.ndarray | None]) -> bool:
        estimate = _fold_estimate(node, inputs)
        if estimate is None:
            return node.op_type in _GROWING
        elements, nbytes = estimate
        return (elements > FOLD_LIMIT and node.op_type not in BULK_FOLDABLE) or nbytes > self.max_bytes

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        opsets = dict(model.opset_imports)
        version = opsets.get("", opsets.get("ai.onnx"))
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
                inputs = _constant_inputs(node)
                if inputs is None or self._too_big(node, inputs):
                    continue
                results = _fold.evaluate(node, inputs, version) if version is not None else None
                if results is None:
                    try:
                        results = _evaluate(node, inputs, opsets)
                    except Exception as exc:  # unsupported by the evaluator: keep the node
                        logger.debug("constant folding skipped %s (%s): %s", node.name, node.op_type, exc)
                        continue
                if not all(isinstance(r, (np.ndarray, np.generic)) for r in results):
                    continue  # a sequence (list) or an optional (None) is no tensor initializer
                limit = None if node.op_type in BULK_FOLDABLE else FOLD_LIMIT
                if any((limit is not None and np.asarray(r).size > limit) or np.asarray(r).nbytes > self.max_bytes
                       for r in results):
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
            namer = None
            for node in list(graph):
                if not is_op(node, "Shape") or node.outputs[0].is_graph_output():
                    continue
                # made at the graph's first Shape node, before this pass changed the graph (the
                # names it avoids are those it would have seen at the start): most graphs have none
                namer = namer or Namer(graph)
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
                    if index.dtype.kind not in "iu" or np.any(index < -len(dims)) or np.any(index >= len(dims)):
                        continue  # out of range: Gather's kernel reports it at run
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
                m = w.shape[0] if w.ndim else -1
                if any(p.size != m for p in (scale, shift, mean, var)) or (b is not None and b.size != m):
                    continue  # lengths that disagree with the weights: the kernels report it at run
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
    """Conv followed by Add of a constant per-output-channel vector, or by Sub of one (the Conv's
    output first): the vector joins the bias (subtracted)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in graphs(model.graph):
            namer = None
            followers = [*_conv_then(graph, "Add"), *_conv_then(graph, "Sub")]
            for conv, add, other, w in followers:  # (a Conv has one reader: in one list at most)
                m = w.shape[0]
                c = _per_channel(other, _conv_output_rank(conv), m)
                if c is None or c.dtype != w.dtype:
                    continue
                if add.op_type == "Sub":
                    if add.inputs[0] is not conv.outputs[0]:
                        continue  # c - conv: not a bias
                    c = -c
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


class ConvFoldsPass(ir.passes.InPlacePass):
    """The Conv folds (BatchNormalization, Mul, Add or Sub of constants) run again while one of
    them folded something: a fold can bring the next op to the Conv (a batch norm spelled out as
    Sub, Mul and Add after the bias Add takes four)."""

    #: rounds at most (a chain of folds longer than this keeps its last ops)
    MOST_ROUNDS = 8

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        folds = (ConvBatchNormFoldPass(), ConvMulFoldPass(), ConvAddFoldPass())
        modified = False
        for _ in range(self.MOST_ROUNDS):
            folded = [fold(model).modified for fold in folds]
            if not any(folded):
                break
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


class RemoveUnusedNodesPass(ir.passes.InPlacePass):
    """Dead code elimination, with the result of onnx-ir's ``RemoveUnusedNodesPass``: nodes none
    of whose outputs is read or a graph output are removed (subgraphs too), then unused
    initializers; a kept node loses its trailing omitted inputs and its unused optional outputs
    (a BatchNormalization only in a known inference mode). Written here because onnx-ir's pass
    asks onnx for each node's schema on every call (4 us each): the optimizer runs it four
    times, which was 10-15% of creation on transformer and QDQ models."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        count = _remove_unused_nodes(graph, graph.opset_imports.get(""))
        keep = frozenset(graph.outputs) | frozenset(graph.inputs)
        for name, value in list(graph.initializers.items()):
            if not value.uses() and value not in keep:
                del graph.initializers[name]
                count += 1
        for function in model.functions.values():
            count += _remove_unused_nodes(function, function.opset_imports.get(""))
        return ir.passes.PassResult(model, bool(count))


def _remove_unused_nodes(graph: ir.Graph | ir.Function, opset: int | None) -> int:
    """Unused nodes removed from ``graph`` and its subgraphs (which read the model's opset):
    how many."""
    outputs = frozenset(graph.outputs)
    count = 0
    for node in reversed(graph):
        if not any(out in outputs or out.uses() for out in node.outputs):
            graph.remove(node, safe=True)
            count += 1
            continue
        inputs = node.inputs
        if inputs and inputs[-1] is None:
            kept = len(inputs)
            while kept and inputs[kept - 1] is None:
                kept -= 1
            node.resize_inputs(kept)
        if opset is not None and node.domain in ("", "onnx.ai"):
            _drop_unused_optional_outputs(node, outputs, opset)
        for attribute in node.attributes.data.values():
            if attribute.type == ir.AttributeType.GRAPH:
                count += _remove_unused_nodes(attribute.value, opset)
            elif attribute.type == ir.AttributeType.GRAPHS:
                for sub in attribute.value:
                    count += _remove_unused_nodes(sub, opset)
    return count


def _drop_unused_optional_outputs(node: ir.Node, graph_outputs: frozenset, opset: int) -> None:
    """Unused optional outputs lose their names; trailing nameless outputs are dropped."""
    form = _output_form(node.op_type, opset, node.domain)
    if form is None:
        return
    has_training_mode, optional = form
    if has_training_mode:  # BatchNormalization: training outputs go only in inference mode
        mode = node.attributes.get("training_mode")
        if mode is not None and (mode.is_ref() or mode.type != ir.AttributeType.INT or mode.as_int() != 0):
            return
        node.attributes.pop("training_mode", None)
    outs = node.outputs
    for i, out in enumerate(outs[:len(optional)]):
        if optional[i] and out not in graph_outputs and not out.uses():
            out.name = ""
    kept = len(outs)
    while kept and not outs[kept - 1].name:
        kept -= 1
    if kept != len(outs):
        node.resize_outputs(kept)


@functools.lru_cache(maxsize=1024)
def _output_form(op_type: str, opset: int, domain: str) -> tuple[bool, tuple[bool, ...]] | None:
    """(whether this is a BatchNormalization with ``training_mode``, which outputs are
    optional) from the op's schema at ``opset``; None where no output can go (no schema, a
    variadic output, none optional)."""
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain=domain)
    except Exception:  # an op onnx does not know: its outputs stay
        return None
    has_training_mode = "training_mode" in schema.attributes
    if op_type == "BatchNormalization" and not has_training_mode:
        return None  # before opset 14 the output count selects training or inference
    option = onnx.defs.OpSchema.FormalParameterOption
    if any(o.option == option.Variadic for o in schema.outputs):
        return None
    optional = tuple(o.option == option.Optional for o in schema.outputs)
    if not any(optional):
        return None
    return op_type == "BatchNormalization" and has_training_mode, optional


class ShapeInferenceQuietPass(ir.passes.InPlacePass):
    """onnx shape inference (so that shape folding knows shapes); a model it cannot infer is
    left as it is.

    The result is that of onnx-ir's ``ShapeInferencePass(strict_mode=False)``; what differs is
    the cost. A model the loader inferred whose Identity/Dropout removal cannot inform inference
    is not inferred again (``graph.load.SHAPES_INFERRED`` says why that cannot learn anything). Otherwise, when
    inference returns the model it was given byte for byte (the common case), nothing is read
    back, instead of deserialising the whole inferred model and comparing every value.
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if model.meta.pop(SHAPES_INFERRED, False):
            # nothing to learn (see SHAPES_INFERRED); the side effects on initializers stay
            _inference_proto(model, serialize=False)
            return ir.passes.PassResult(model, False)
        if any(v.type is None for v in model.graph.inputs):
            # onnx's C++ inference can crash (not raise) on an untyped input, e.g. a map-typed
            # one, which onnx-ir cannot represent (DictVectorizer's input)
            return ir.passes.PassResult(model, False)
        try:
            proto = _inference_proto(model)
            assert proto is not None
            sent = proto.SerializeToString()
            inferred = onnx.shape_inference.infer_shapes(sent, check_type=True, strict_mode=False, data_prop=True)
            if inferred.SerializeToString() == sent:
                return ir.passes.PassResult(model, False)
            return ir.passes.PassResult(model, _merge_inferred(model, inferred))
        except Exception as exc:
            logger.debug("shape inference skipped: %s", exc)
            return ir.passes.PassResult(model, False)


def _inference_proto(model: ir.Model, serialize: bool = True) -> onnx.ModelProto | None:
    """The model as shape inference gets it: initializers are graph inputs too, and those over
    ``INFERENCE_DATA_LIMIT`` bytes (or without data) are sent without their data. The model
    is restored afterwards, with onnx-ir's side effects kept so that results do not depend on
    which implementation ran: initializers get their tensor's shape and type where they had
    none, and those sent without data end up after the others. With ``serialize`` False only
    those side effects happen."""
    graph = model.graph
    initializers = tuple(graph.initializers.values())
    saved = {v.name: v.const_value for v in initializers}
    n_inputs = len(graph.inputs)
    input_set = set(graph.inputs)
    try:
        for value in initializers:
            tensor = value.const_value
            if tensor is not None:
                if value.shape is None:
                    value.shape = tensor.shape
                if value.dtype is None:
                    value.dtype = tensor.dtype
            if value not in input_set:
                graph.inputs.append(value)
            if tensor is None:
                graph.initializers.pop(value.name)
            elif tensor.nbytes > INFERENCE_DATA_LIMIT:
                value.const_value = None
                graph.initializers.pop(value.name)
        return ir.serde.serialize_model(model) if serialize else None
    finally:
        for value in initializers:
            value.const_value = saved[value.name]
            if value.name not in graph.initializers:
                graph.initializers.add(value)
        kept = graph.inputs[:n_inputs]
        graph.inputs.clear()
        graph.inputs.extend(kept)


def _merge_inferred(model: ir.Model, inferred: onnx.ModelProto) -> bool:
    """Take the inferred shapes and types, value by name, graph by graph (onnx-ir's merge)."""
    inferred_model = ir.serde.deserialize_model(inferred)
    modified = False
    for graph, inferred_graph in zip(model.graphs(), inferred_model.graphs()):
        found = ir.convenience.create_value_mapping(inferred_graph)
        for name, value in ir.convenience.create_value_mapping(graph).items():
            other = found.get(name)
            if other is None:
                continue
            if other.shape is not None and value.shape != other.shape:
                value.shape = other.shape
                modified = True
            if other.dtype is not None and value.dtype != other.dtype:
                value.dtype = other.dtype
                modified = True
    return modified
