"""Session creation's shortcuts give what the slower ways they replace gave.

Each fast path (numpy constant folding, the lift and shape-inference passes, the shared code of
generated run functions) is checked against what it replaced: ``onnx.reference``, onnx-ir's
passes, a fresh compile. Speed is never asserted here.
"""

from __future__ import annotations

import copy

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_ir.passes import common as common_passes

import ort_core
from conftest import make_model
from ort_core.graph import load
from ort_core.graph.load import SHAPES_INFERRED, load_model
from ort_core.optimizer import _fold, basic
from ort_core.testing import models

# --------------------------------------------------------------------------------------------
# numpy folding against onnx.reference
# --------------------------------------------------------------------------------------------


def _node(op_type: str, n_inputs: int, opset: int, **attrs) -> tuple[ir.Node, int]:
    names = [f"i{k}" for k in range(n_inputs)]
    proto = helper.make_node(op_type, names, ["y"], **attrs)
    return ir.serde.deserialize_node(proto), opset


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")


I64 = np.int64
F32 = np.float32
x234 = np.arange(24, dtype=F32).reshape(2, 3, 4)
#: values for QuantizeLinear: halves (round to even), both saturations, a NaN
QX = np.array([[-300.0, -2.5, -0.5, 0.0], [0.5, 1.5, 2.5, 3.49], [0.015, 1e6, np.nan, -1e-3]], F32)[None].repeat(2, 0)

# (op, opset, attributes, inputs): forms of every op the numpy folding covers, and some it defers
CASES = [
    ("Concat", 13, {"axis": 0}, [np.array([1, 2], I64), np.array([3], I64)]),
    ("Concat", 13, {"axis": -1}, [x234, x234]),
    ("Concat", 13, {"axis": 1}, [x234, x234.astype(np.float64)]),  # mixed: deferred
    ("Concat", 13, {"axis": 0}, [np.array(1, I64), np.array(2, I64)]),  # rank 0: the reference refuses
    ("Reshape", 13, {}, [x234, np.array([0, -1], I64)]),
    ("Reshape", 14, {"allowzero": 1}, [np.zeros((0, 3), F32), np.array([3, 0], I64)]),
    ("Reshape", 14, {"allowzero": 0}, [x234, np.array([0, 0, 2, 2], I64)]),
    ("Reshape", 13, {}, [x234, np.array([5, 0, 0, 0], I64)]),  # zero beyond the rank: refused
    ("Transpose", 13, {}, [x234]),
    ("Transpose", 13, {"perm": [2, 0, 1]}, [x234]),
    ("Transpose", 13, {"perm": [1, 0]}, [x234]),  # wrong length: refused
    ("Squeeze", 13, {}, [np.zeros((1, 3, 1), F32)]),
    ("Squeeze", 13, {}, [np.zeros((1, 3, 1), F32), np.array([-1], I64)]),
    ("Squeeze", 13, {}, [np.zeros((1, 3, 1), F32), np.array([], I64)]),
    ("Squeeze", 11, {"axes": [0, -1]}, [np.zeros((1, 3, 1), F32)]),
    ("Squeeze", 11, {}, [np.zeros((1, 3, 1), F32)]),
    ("Squeeze", 13, {}, [np.zeros((2, 3), F32), np.array([0], I64)]),  # not 1: refused
    ("Unsqueeze", 13, {}, [np.array([1, 2], I64), np.array([0, -1], I64)]),
    ("Unsqueeze", 13, {}, [np.array(5, I64), np.array([0], I64)]),
    ("Unsqueeze", 11, {"axes": [2, 0]}, [x234]),
    ("Unsqueeze", 11, {"axes": [-1]}, [x234]),
    ("Gather", 13, {}, [np.array([10, 20, 30], I64), np.array(1, I64)]),
    ("Gather", 13, {"axis": 1}, [x234, np.array([[0, -1]], I64)]),
    ("Gather", 13, {}, [x234, np.array([5], np.int32)]),  # out of range: refused
    ("Slice", 13, {}, [x234, np.array([0], I64), np.array([1], I64)]),
    ("Slice", 13, {}, [x234, np.array([-1, 1], I64), np.array([-100, 10], I64), np.array([2, 0], I64),
                       np.array([-1, 1], I64)]),
    ("Slice", 13, {}, [np.arange(10, dtype=I64), np.array([1], I64), np.array([9], I64), None,
                       np.array([3], I64)]),
    ("Slice", 13, {}, [x234, np.array([0], np.int32), np.array([2], np.int32), np.array([-2], np.int32)]),
    ("Cast", 13, {"to": TensorProto.INT64}, [np.array([1.7, -2.5, 3.0], F32)]),
    ("Cast", 13, {"to": TensorProto.FLOAT16}, [np.array([1, 2, 70000], I64)]),
    ("Cast", 13, {"to": TensorProto.BOOL}, [np.array([0.0, 0.5, np.nan], F32)]),
    ("Cast", 19, {"to": TensorProto.INT32, "saturate": 0}, [np.array([3, 4], I64)]),
    ("Cast", 13, {"to": TensorProto.STRING}, [np.array([1, 2], I64)]),  # deferred
    ("Cast", 19, {"to": TensorProto.FLOAT8E4M3FN}, [np.array([1.0, 500.0], F32)]),  # deferred
    ("ConstantOfShape", 13, {}, [np.array([2, 3], I64)]),
    ("ConstantOfShape", 13, {"value": numpy_helper.from_array(np.array([7], np.int32))}, [np.array([4], I64)]),
    ("ConstantOfShape", 13, {"value": numpy_helper.from_array(np.array([True]))}, [np.array([], I64)]),
    ("ConstantOfShape", 13, {"value": numpy_helper.from_array(np.array([1.5], np.float16))}, [np.array([2, 0], I64)]),
    ("QuantizeLinear", 13, {}, [QX, np.array(0.02, F32), np.array(128, np.uint8)]),
    ("QuantizeLinear", 13, {}, [QX, np.array(0.02, F32)]),  # no zero point: uint8
    ("QuantizeLinear", 21, {}, [QX, np.array([0.01], F32), np.array([-3], np.int8)]),
    ("QuantizeLinear", 13, {"axis": 0}, [QX, np.array([0.01, 0.02, 0.05], F32), np.array([0, -5, 7], np.int8)]),
    ("QuantizeLinear", 13, {"axis": -1}, [QX, np.array([0.001, 0.002, 0.003, 0.004], F32),
                                          np.array([0, 10, 100, 1000], np.int16)]),
    ("QuantizeLinear", 21, {"output_dtype": TensorProto.UINT16}, [QX, np.array(0.0001, F32)]),
    ("QuantizeLinear", 21, {"block_size": 2, "axis": 2}, [QX, np.full((3, 2), 0.01, F32)]),  # blocked: deferred
    ("QuantizeLinear", 19, {}, [QX, np.array(0.1, F32), np.array(0, np.int8)]),
    ("QuantizeLinear", 13, {}, [np.array([0.5, -2.5], np.float16), np.array(0.1, np.float16)]),  # float16: deferred
]


@pytest.mark.parametrize("op, opset, attrs, inputs", CASES, ids=[f"{c[0]}-{k}" for k, c in enumerate(CASES)])
def test_numpy_folding_matches_onnx_reference(op, opset, attrs, inputs):
    node, version = _node(op, len(inputs), opset, **attrs)
    try:
        want = basic._evaluate(node, inputs, {"": opset})
    except Exception:
        want = None
    got = _fold.evaluate(node, inputs, version)
    if got is None:  # deferred: the pass asks the reference, which then decides
        return
    assert want is not None, f"numpy folding answered where onnx.reference refuses: {got}"
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert _same(g, w), f"{op}: {g!r} != {w!r}"


def test_numpy_folding_answers_the_common_forms():
    """Most cases above must be answered by numpy (else the comparison above tests nothing)."""
    answered = set()
    for op, opset, attrs, inputs in CASES:
        node, version = _node(op, len(inputs), opset, **attrs)
        if _fold.evaluate(node, inputs, version) is not None:
            answered.add(op)
    assert answered == set(_fold._EVALUATORS)


def _backend_cases(op: str):
    from ort_core.testing import conformance

    for case in conformance.load_cases(["node"], pattern=f"^test_{op.lower()}"):
        graph = case.model.graph
        if len(graph.node) != 1 or graph.node[0].op_type != op or not case.data_sets:
            continue
        opset = next(o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx"))
        inputs = case.data_sets[0][0]
        names = [n for n in graph.node[0].input]
        feeds = iter(inputs)
        arrays = [next(feeds) if n else None for n in names]
        yield case.name, ir.serde.deserialize_node(graph.node[0]), opset, arrays


def test_numpy_folding_on_the_onnx_backend_cases():
    """Every single-node backend test case of the covered ops: numpy's answer, when it gives
    one, is onnx.reference's, bit for bit."""
    answered = 0
    for op in _fold._EVALUATORS:
        for name, node, opset, inputs in _backend_cases(op):
            if any(x is not None and not isinstance(x, np.ndarray) for x in inputs):
                continue
            got = _fold.evaluate(node, inputs, opset)
            if got is None:
                continue
            want = basic._evaluate(node, inputs, {"": opset})
            assert all(_same(g, w) for g, w in zip(got, want)), name
            answered += 1
    assert answered >= 60, answered


# --------------------------------------------------------------------------------------------
# the lift and shape-inference passes against onnx-ir's
# --------------------------------------------------------------------------------------------


def _constants_model() -> onnx.ModelProto:
    """Constants of every attribute kind, one used as a graph output, one in an If branch."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    then_graph = helper.make_graph(
        [helper.make_node("Constant", [], ["c_then"], value_floats=[1.0, 2.0, 3.0]),
         helper.make_node("Add", ["x", "c_then"], ["t"])],
        "then", [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 3])])
    else_graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"])],
        "else", [], [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 3])])
    nodes = [
        helper.make_node("Constant", [], ["shape"], value_ints=[3, 2]),
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Constant", [], ["one"], value_float=1.0),
        helper.make_node("Add", ["r", "one"], ["a"]),
        helper.make_node("Constant", [], ["k"], value_int=2),
        helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(np.ones((2, 3), np.float32), "w")),
        helper.make_node("Mul", ["x", "w"], ["m"]),
        helper.make_node("Constant", [], ["s"], value_strings=["a", "b"]),
        helper.make_node("Constant", [], ["cond"], value=numpy_helper.from_array(np.array(True), "cond")),
        helper.make_node("If", ["cond"], ["branch"], then_branch=then_graph, else_branch=else_graph),
        helper.make_node("Constant", [], ["out_const"], value_floats=[4.0]),
    ]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
               for n, shape in (("a", [3, 2]), ("m", [2, 3]), ("branch", [2, 3]), ("out_const", [1]))]
    outputs.append(helper.make_tensor_value_info("k", TensorProto.INT64, []))
    outputs.append(helper.make_tensor_value_info("s", TensorProto.STRING, [2]))
    return make_model(nodes, [x], outputs)


def _identity_blocks_inference_model() -> onnx.ModelProto:
    """Shape -> Identity -> Reshape: onnx's data propagation stops at Identity, so the
    optimizer's second inference (after Identity removal) learns the Reshape's shape."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])
    nodes = [
        helper.make_node("Shape", ["x"], ["s0"]),
        helper.make_node("Identity", ["s0"], ["s"]),
        helper.make_node("Reshape", ["x", "s"], ["r"]),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    return make_model(nodes, [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])])


def _float_identity_model() -> onnx.ModelProto:
    """Shape -> Cast(float) -> Identity -> Cast(int64) -> Reshape: onnx propagates shape data
    through Cast, also to float, so a float Identity can block it too."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])
    nodes = [
        helper.make_node("Shape", ["x"], ["s0"]),
        helper.make_node("Cast", ["s0"], ["sf"], to=TensorProto.FLOAT),
        helper.make_node("Identity", ["sf"], ["sf2"]),
        helper.make_node("Cast", ["sf2"], ["s"], to=TensorProto.INT64),
        helper.make_node("Reshape", ["x", "s"], ["r"]),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    return make_model(nodes, [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])])


def _serialized(model: ir.Model) -> bytes:
    return ir.serde.serialize_model(model).SerializeToString(deterministic=True)


def _corpus() -> list[tuple[str, onnx.ModelProto]]:
    return [
        ("constants", _constants_model()),
        ("identity", _identity_blocks_inference_model()),
        ("float-identity", _float_identity_model()),
        ("mlp", models.mlp(hidden=32, layers=2)),
        ("cnn", models.cnn(image=16, width=8, blocks=1)),
        ("transformer", models.transformer(vocab=50, seq=8, dim=16, heads=2, layers=1)),
    ]


@pytest.mark.parametrize("name, proto", _corpus(), ids=[n for n, _ in _corpus()])
def test_lift_pass_is_onnx_irs(name, proto):
    ours, theirs = load_model(proto), load_model(proto)
    a = basic.LiftConstantsPass()(ours).modified
    b = common_passes.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(theirs).modified
    assert a == b
    assert _serialized(ours) == _serialized(theirs)


@pytest.mark.parametrize("name, proto", _corpus(), ids=[n for n, _ in _corpus()])
def test_shape_inference_pass_is_onnx_irs(name, proto):
    """After the passes that run before it (so that the identity case has something to learn),
    the pass leaves the model exactly as onnx-ir's ShapeInferencePass(strict_mode=False) does:
    the same shapes, and the same initializer order."""
    before = [basic.LiftConstantsPass(), basic.DropoutEliminationPass(), basic.IdentityEliminationPass(),
              common_passes.RemoveUnusedNodesPass()]
    ours, theirs = load_model(proto), load_model(proto)
    for p in before:
        p(ours)
        p(theirs)
    a = basic.ShapeInferenceQuietPass()(ours).modified
    b = common_passes.ShapeInferencePass(strict_mode=False)(theirs).modified
    assert a == b
    assert _serialized(ours) == _serialized(theirs)
    if name in ("identity", "float-identity"):  # learned: not just the fast path
        assert a and [n for n in ours.graph if n.op_type == "Reshape"][0].outputs[0].shape[1] == 6


def _removal_model(bn_opset: int) -> onnx.ModelProto:
    """Dead nodes (in the main graph and in an If branch), trailing omitted inputs, unused
    optional outputs (LSTM's, a BatchNormalization's in inference mode), an unused initializer."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    ys = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("lstm_y", "bn_y", "branch_y")]
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal(shape).astype(F32), name) for name, shape in
             (("W", (1, 8, 4)), ("R", (1, 8, 2)), ("scale", (3,)), ("bias", (3,)), ("mean", (3,)),
              ("var", (3,)), ("unused", (5,)))]
    inits[5] = numpy_helper.from_array(np.abs(numpy_helper.to_array(inits[5])) + 1, "var")

    def branch(name: str, op: str) -> onnx.GraphProto:
        nodes = [helper.make_node("Neg", ["x"], [f"{name}_dead"]), helper.make_node(op, ["x"], [f"{name}_y"])]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)])

    bn_outputs = ["bn_y", "bn_mean", "bn_var"] if bn_opset >= 14 else ["bn_y", "bn_mean", "bn_var", "bn_sm", "bn_sv"]
    nodes = [
        helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
        helper.make_node("LSTM", ["xt", "W", "R", "", "", "", ""], ["lstm_y", "lstm_h", "lstm_c"], hidden_size=2),
        helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], bn_outputs),
        helper.make_node("Relu", ["x"], ["dead"]),
        helper.make_node("Sigmoid", ["dead"], ["dead2"]),
        helper.make_node("If", ["c"], ["branch_y"], then_branch=branch("then", "Abs"), else_branch=branch("else", "Neg")),
    ]
    graph = helper.make_graph(nodes, "removal", [x, c], ys, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", bn_opset)])


def _removal_corpus() -> list[tuple[str, onnx.ModelProto]]:
    return _corpus() + [("removal-bn9", _removal_model(9)), ("removal-bn15", _removal_model(15))]


@pytest.mark.parametrize("name, proto", _removal_corpus(), ids=[n for n, _ in _removal_corpus()])
def test_unused_removal_pass_is_onnx_irs(name, proto):
    ours, theirs = load_model(proto), load_model(proto)
    for p in (basic.LiftConstantsPass(), basic.IdentityEliminationPass()):
        p(ours)
        p(theirs)
    a = basic.RemoveUnusedNodesPass()(ours).modified
    b = common_passes.RemoveUnusedNodesPass()(theirs).modified
    assert a == b
    assert _serialized(ours) == _serialized(theirs)
    if name.startswith("removal"):
        ops = [n.op_type for n in ours.graph]
        assert "Relu" not in ops and "unused" not in ours.graph.initializers
        lstm = next(n for n in ours.graph if n.op_type == "LSTM")
        assert len(lstm.inputs) == 3 and len(lstm.outputs) == 1


def test_unused_removal_asks_for_each_schema_once(monkeypatch):
    """The schema of an op at an opset is looked up once per process, not per node and pass."""
    calls = []
    get_schema = onnx.defs.get_schema
    monkeypatch.setattr(onnx.defs, "get_schema", lambda *a, **k: calls.append(a) or get_schema(*a, **k))
    basic._output_form.cache_clear()
    for _ in range(3):
        basic.RemoveUnusedNodesPass()(load_model(models.transformer(vocab=50, seq=8, dim=16, heads=2, layers=2)))
    assert calls and len(calls) == len(set(calls))


def _real_models() -> list[tuple[str, bytes]]:
    """The real models bench/ uses, where a checkout has fetched them (never downloaded here)."""
    from pathlib import Path

    cache = Path(__file__).resolve().parents[2] / "models-cache"
    return [(p.parent.name, p.read_bytes()) for p in sorted(cache.glob("*/*.onnx"))]


def test_skipping_the_second_inference_gives_the_same_graph(monkeypatch, ort_nodes):
    """Models inferred at load whose Identity/Dropout removal cannot inform inference skip the
    optimizer's: the optimized graph (shapes included) is byte for byte the one a second
    inference gives."""
    cases = [(n, p.SerializeToString()) for n, p in _corpus()] + _real_models()

    def optimized(data: bytes) -> bytes:
        sess = ort_core.InferenceSession(data, providers=["CPUExecutionProvider"])
        return _serialized(sess._model)

    skipped = 0
    for name, data in cases:
        skip = SHAPES_INFERRED in load_model(data).meta
        assert not (skip and name in ("identity", "float-identity")), name  # removal informs these
        skipped += skip
        with monkeypatch.context() as m:
            m.setattr(load, "_removal_may_inform", lambda graph: True)  # never skip
            assert SHAPES_INFERRED not in load_model(data).meta
            want = optimized(data)
        assert optimized(data) == want, name
    assert skipped >= 3


def _identity_after(*ops: tuple[str, dict], rank_known: bool = False) -> onnx.ModelProto:
    """x -> the ops (each reads the last output; Unsqueeze/Squeeze also constant axes) ->
    Identity -> Relu. ``rank_known``: x is typed [N, 6], else x has no shape."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6] if rank_known else None)
    axes = numpy_helper.from_array(np.array([0], I64), "axes")
    nodes, last = [], "x"
    for k, (op, attrs) in enumerate(ops):
        inputs = [last, "axes"] if op in ("Unsqueeze", "Squeeze") else [last, last] if op == "Concat" else [last]
        nodes.append(helper.make_node(op, inputs, [f"t{k}"], **attrs))
        last = f"t{k}"
    nodes += [helper.make_node("Identity", [last], ["i"]), helper.make_node("Relu", ["i"], ["y"])]
    graph = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [axes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("ops, skips", [
    ([("Softmax", {})], True),  # no data propagation: the Identity passes on no data
    ([("Softmax", {}), ("Unsqueeze", {})], True),  # the axes are constant, the data input is not
    ([("Softmax", {}), ("Concat", {"axis": 0}), ("Cast", {"to": TensorProto.FLOAT})], True),
    ([("Shape", {}), ("Cast", {"to": TensorProto.FLOAT})], False),  # shape data, cast to float
    ([("Shape", {}), ("Unsqueeze", {}), ("Squeeze", {}), ("Concat", {"axis": 0}), ("Cast", {"to": TensorProto.FLOAT})],
     False),
], ids=["softmax", "unsqueeze-of-softmax", "concat-cast-of-softmax", "shape-cast", "shape-through-four-ops"])
def test_identity_of_a_value_without_data_skips_the_second_inference(ops, skips):
    """The second inference is skipped for an Identity of a value of unknown shape where onnx
    can hold no data for it (its producers have no data propagation back to a non-constant input)."""
    model = load_model(_identity_after(*ops))
    assert (SHAPES_INFERRED in model.meta) is skips


def test_shape_inference_pass_restores_the_model_when_inference_fails(monkeypatch):
    model = load_model(models.mlp(hidden=32, layers=2))
    basic.LiftConstantsPass()(model)
    inputs = list(model.graph.inputs)
    initializers = {n: v.const_value for n, v in model.graph.initializers.items()}

    def fail(*args, **kwargs):
        raise RuntimeError("inference broke")

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", fail)
    assert not basic.ShapeInferenceQuietPass()(model).modified
    assert list(model.graph.inputs) == inputs
    assert {n: v.const_value for n, v in model.graph.initializers.items()} == initializers


def test_folding_with_and_without_numpy_gives_the_same_graph(monkeypatch, ort_nodes):
    """A model full of foldable shape arithmetic: the optimized graph is byte for byte the one
    onnx.reference alone gives."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 6])
    inits = [numpy_helper.from_array(np.array(v, I64), n) for n, v in
             (("hw", [2, 12]), ("zero", [0]), ("one", [1]), ("three", [3]), ("idx", [2, 0]), ("eight", [8]))]
    inits.append(numpy_helper.from_array(np.arange(12, dtype=F32).reshape(3, 4), "table"))
    nodes = [
        helper.make_node("Unsqueeze", ["hw", "zero"], ["hw2"]),
        helper.make_node("Squeeze", ["hw2", "zero"], ["hw3"]),
        helper.make_node("Concat", ["zero", "hw3"], ["shape"], axis=0),  # [0, 2, 12]
        helper.make_node("Cast", ["shape"], ["shape_f"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["shape_f"], ["shape_i"], to=TensorProto.INT64),
        helper.make_node("Slice", ["shape_i", "one", "three"], ["shape_s"]),  # [2, 12]
        helper.make_node("ConstantOfShape", ["shape_s"], ["ones"], value=numpy_helper.from_array(np.array([1.0], F32))),
        helper.make_node("Reshape", ["x", "shape_i"], ["y0"]),
        helper.make_node("Add", ["y0", "ones"], ["y1"]),
        helper.make_node("Gather", ["table", "idx"], ["rows"], axis=0),
        helper.make_node("Transpose", ["rows"], ["cols"], perm=[1, 0]),
        helper.make_node("Reshape", ["cols", "eight"], ["flat"]),
        helper.make_node("Mul", ["flat", "flat"], ["sq"]),
    ]
    outputs = [helper.make_tensor_value_info("y1", TensorProto.FLOAT, ["N", 2, 12]),
               helper.make_tensor_value_info("sq", TensorProto.FLOAT, [8])]
    proto = make_model(nodes, [x], outputs, inits)

    def optimized() -> bytes:
        sess = ort_core.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
        return _serialized(sess._model)

    fast = optimized()
    monkeypatch.setattr(_fold, "evaluate", lambda node, inputs, version: None)
    assert optimized() == fast
    assert b"Cast" not in fast and b"Gather" not in fast  # folded (else the test compares nothing)


# --------------------------------------------------------------------------------------------
# generated run functions share compiled code, not kernels
# --------------------------------------------------------------------------------------------


def test_plans_of_the_same_shape_keep_their_own_kernels(ort_nodes):
    """Two models of one structure, different weights: the second session reuses the first's
    compiled run function, and each still computes with its own weights."""
    import onnxruntime

    a, b = models.mlp(hidden=32, layers=2, seed=1), models.mlp(hidden=32, layers=2, seed=2)
    feeds = models.random_inputs(a, batch=3)
    for proto in (a, b, copy.deepcopy(a)):
        data = proto.SerializeToString()
        got = ort_core.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
        want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)


def test_string_initializers_reach_kernels_as_str_not_bytes():
    """onnx-ir gives a string tensor's data as bytes; kernels (and so the outputs that carry
    initializer strings, e.g. skl2onnx's class labels) must see str, as onnxruntime returns."""
    from ort_core.graph.view import GraphView

    labels = numpy_helper.from_array(np.array(["neg", "pos"], dtype=object), "labels")
    node = helper.make_node("Identity", ["labels"], ["y"])
    attr_node = helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array(["a"], dtype=object)))
    graph = helper.make_graph([node, attr_node], "g", [], [helper.make_tensor_value_info("y", TensorProto.STRING, [2]),
                                                           helper.make_tensor_value_info("c", TensorProto.STRING, [1])],
                              [labels])
    view = GraphView(load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])).graph)
    value = view.value("labels").const_value
    assert value.dtype == object and value.tolist() == ["neg", "pos"]
    assert view.value("c").const_value.tolist() == ["a"]
    assert view.nodes[1].attr("value").tolist() == ["a"]


def _models_sent_to_inference(monkeypatch) -> list[onnx.ModelProto]:
    """The models onnx's shape inference is given from now on, in order."""
    sent: list[onnx.ModelProto] = []
    real = onnx.shape_inference.infer_shapes

    def spy(model, *args, **kwargs):
        sent.append(model if isinstance(model, onnx.ModelProto) else onnx.load_from_string(model))
        return real(model, *args, **kwargs)

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", spy)
    return sent


def test_large_initializers_go_to_inference_without_their_data(monkeypatch):
    """Shape inference is sent the main graph's large initializers as typed inputs without
    their data (onnx copies what it infers twice over: that was most of a session's peak
    memory); shape arithmetic still reads the small constants, and the loaded model has every
    initializer back with its values, graph inputs as declared (an overridable initializer
    stays an input)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 64)).astype(F32)
    w2 = rng.standard_normal((64, 64)).astype(F32)  # overridable: also a graph input
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("MatMul", ["h", "w2"], ["h2"]),
             helper.make_node("Reshape", ["h2", "shape"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64]),
         helper.make_tensor_value_info("w2", TensorProto.FLOAT, [64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w2, "w2"),
         numpy_helper.from_array(np.array([-1, 8, 8], I64), "shape")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sent = _models_sent_to_inference(monkeypatch)
    model = load_model(proto.SerializeToString())
    assert sent and all(len(t.raw_data) <= load.INFERENCE_DATA_LIMIT for m in sent for t in m.graph.initializer)
    assert {t.name for t in sent[0].graph.initializer} == {"shape"}
    assert [v.name for v in model.graph.inputs] == ["x", "w2"]
    values = {n: v.const_value.numpy() for n, v in model.graph.initializers.items()}
    assert set(values) == {"w", "w2", "shape"}
    np.testing.assert_array_equal(values["w"], w)
    np.testing.assert_array_equal(values["w2"], w2)
    reshaped = [n for n in model.graph if n.op_type == "Reshape"][0].outputs[0]
    assert reshaped.shape is not None and list(reshaped.shape)[1:] == [8, 8]
    assert model.graph.outputs[0].shape is not None and list(model.graph.outputs[0].shape)[1:] == [8, 8]


@pytest.mark.parametrize("level", ["ORT_DISABLE_ALL", "ORT_ENABLE_ALL"])
def test_large_constant_nodes_reach_inference_without_their_data(monkeypatch, ort_nodes, level):
    """Weights held in Constant nodes (paddle2onnx's PP-OCR and PicoDet) go to shape inference
    as typed graph inputs without data, and come back as initializers named as the Constants'
    outputs (as onnxruntime makes every Constant at load); small Constants (shape arithmetic)
    and one giving a graph output stay nodes."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((32, 32)).astype(F32)
    big = rng.standard_normal((40, 40)).astype(F32)
    w_tensor = numpy_helper.from_array(w, "named_otherwise")
    nodes = [helper.make_node("Constant", [], ["w"], value=w_tensor, name="weights"),
             helper.make_node("Constant", [], ["shape"], value=numpy_helper.from_array(np.array([-1, 4, 8], I64))),
             helper.make_node("Constant", [], ["out2"], value=numpy_helper.from_array(big)),
             helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Reshape", ["h", "shape"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("out2", TensorProto.FLOAT, None)])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    sent = _models_sent_to_inference(monkeypatch)
    model = load_model(data)
    assert sent and [n.output[0] for n in sent[0].graph.node if n.op_type == "Constant"] == ["shape", "out2"]
    assert [n.op_type for n in model.graph] == ["Constant", "Constant", "MatMul", "Reshape"]
    assert [v.name for v in model.graph.inputs] == ["x"]
    weights = model.graph.initializers["w"].const_value
    assert weights.name == "w"
    np.testing.assert_array_equal(weights.numpy(), w)
    assert list(model.graph.outputs[0].shape)[1:] == [4, 8]  # inferred through the Reshape
    options = ort_core.SessionOptions()
    options.graph_optimization_level = getattr(ort_core.GraphOptimizationLevel, level)
    x = rng.standard_normal((2, 32)).astype(F32)
    got = ort_core.InferenceSession(data, options, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got[0], (x @ w).reshape(-1, 4, 8), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[1], big)


# --------------------------------------------------------------------------------------------
# the cyclic garbage collector is paused while a session is made
# --------------------------------------------------------------------------------------------


def _long_chain(n: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", [f"v{k}"], [f"v{k + 1}"], name=f"relu{k}") for k in range(n)]
    return make_model(nodes, [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [2, 3])],
                      [helper.make_tensor_value_info(f"v{n}", TensorProto.FLOAT, [2, 3])])


def test_no_collection_runs_while_a_session_is_made(ort_nodes):
    """Creation makes many IR objects; collections they would trigger (each walks every object
    of the process) wait until the session is made, and the collector is on again after."""
    import gc

    data = _long_chain(200).SerializeToString()
    ort_core.InferenceSession(data, providers=["CPUExecutionProvider"])  # imports, plugin loading
    starts: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            starts.append(info["generation"])

    gc.collect()
    gc.callbacks.append(count)
    try:
        session = ort_core.InferenceSession(data, providers=["CPUExecutionProvider"])
    finally:
        gc.callbacks.remove(count)
    # at most the one young collection the re-enabled collector may start on its way out
    # (without the pause: 12 for these 200 nodes)
    assert len(starts) <= 1, starts
    assert gc.isenabled()
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(session.run(None, {"v0": -x})[0], 0 * x)


def test_a_collector_the_user_turned_off_stays_off(ort_nodes):
    import gc

    gc.disable()
    try:
        ort_core.InferenceSession(_long_chain(3).SerializeToString(), providers=["CPUExecutionProvider"])
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_collector_is_on_again_after_a_failed_creation(ort_nodes):
    import gc

    with pytest.raises(ort_core.OrtError):
        ort_core.InferenceSession(b"not a model", providers=["CPUExecutionProvider"])
    assert gc.isenabled()


def test_the_collector_is_on_again_after_concurrent_creations(ort_nodes):
    """The last of several creations in threads turns it back on, not the first to finish."""
    import gc
    import threading

    data = [_long_chain(n).SerializeToString() for n in (5, 40, 10, 60)]
    errors: list[BaseException] = []

    def make(model: bytes) -> None:
        try:
            ort_core.InferenceSession(model, providers=["CPUExecutionProvider"])
        except BaseException as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=make, args=(d,)) for d in data]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert gc.isenabled()


def test_a_loaded_model_holds_no_proto_tensors():
    """Initializers (main graph and subgraphs) and Constant values are numpy-backed after
    loading, with their values: a proto tensor would keep the whole parsed model alive beside
    the arrays kernels read (the weights twice over for the session's life)."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((32, 16)).astype(F32)
    c = rng.standard_normal((16,)).astype(F32)
    b16 = rng.standard_normal((4,)).astype(np.float16)
    then = helper.make_graph([helper.make_node("Add", ["h", "tb"], ["o"])], "then", [],
                             [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)],
                             [numpy_helper.from_array(c, "tb")])
    other = helper.make_graph([helper.make_node("Sub", ["h", "tb2"], ["o2"])], "else", [],
                              [helper.make_tensor_value_info("o2", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(c, "tb2")])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(c, "k")),
             helper.make_node("Add", ["m", "k"], ["h"]),
             helper.make_node("If", ["flag"], ["y"], then_branch=then, else_branch=other),
             helper.make_node("Cast", ["half"], ["half32"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 32]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("half32", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b16, "half")])
    model = load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    tensors = {}
    for g in model.graphs():
        tensors.update((v.name, v.const_value) for v in g.initializers.values())
        for node in g:
            if node.op_type == "Constant":
                tensors[node.outputs[0].name] = node.attributes["value"].value
    assert set(tensors) == {"w", "half", "tb", "tb2", "k"}
    for name, tensor in tensors.items():
        assert not isinstance(tensor, ir.serde.TensorProtoTensor), name
    np.testing.assert_array_equal(tensors["w"].numpy(), w)
    np.testing.assert_array_equal(tensors["k"].numpy(), c)
    np.testing.assert_array_equal(tensors["tb2"].numpy(), c)
    assert tensors["half"].numpy().dtype == np.float16 and tensors["half"].dtype == ir.DataType.FLOAT16
    np.testing.assert_array_equal(tensors["half"].numpy(), b16)


def _value_types_model() -> onnx.ModelProto:
    """value_info entries of every kind load meets: plain ones (fixed, symbolic, unknown and
    zero dims, no shape), one with a doc string, a dimension denotation, a type denotation, a
    sequence type, one naming an initializer, one naming a graph output that its own output
    entry contradicts, and one in an If branch."""
    then = helper.make_graph([helper.make_node("Neg", ["a"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    then.value_info.append(helper.make_tensor_value_info("t", TensorProto.FLOAT, ["B", 4]))
    other = helper.make_graph([helper.make_node("Abs", ["a"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Shape", ["a"], ["s"]),
             helper.make_node("Add", ["a", "w"], ["b"]), helper.make_node("Sigmoid", ["b"], ["c"]),
             helper.make_node("SequenceConstruct", ["c"], ["seq"]), helper.make_node("Neg", ["c"], ["d"]),
             helper.make_node("Identity", ["d"], ["y"]), helper.make_node("Cast", ["s"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("If", ["flag"], ["z"], then_branch=then, else_branch=other)]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 4]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", None]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("f", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.ones(4, F32), "w")])
    documented = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["B", 4])
    documented.doc_string = "the sum"
    denoted = helper.make_tensor_value_info("c", TensorProto.FLOAT, ["B", 4])
    denoted.type.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    typed = helper.make_tensor_value_info("d", TensorProto.FLOAT, ["B", 0])
    typed.type.denotation = "TENSOR"
    graph.value_info.extend([
        helper.make_tensor_value_info("a", TensorProto.FLOAT, ["B", 4]), documented, denoted, typed,
        helper.make_tensor_value_info("w", TensorProto.FLOAT, [4]),
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [7, 7]),
        helper.make_tensor_value_info("s", TensorProto.INT64, None),
    ])
    graph.value_info.append(helper.make_value_info(
        "seq", helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, ["B", 4]))))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _value_types(model: ir.Model) -> list[tuple]:
    seen = []
    for graph in model.graphs():
        values = [*graph.inputs, *graph.initializers.values(), *(v for n in graph for v in n.outputs), *graph.outputs]
        for v in values:
            shape = None if v.shape is None else [(d, getattr(d, "denotation", None)) for d in v.shape.dims]
            denotations = None if v.shape is None else [v.shape.get_denotation(k) for k in range(len(v.shape))]
            seen.append((v.name, repr(v.type), None if v.type is None else v.type.denotation, repr(shape),
                         denotations, v.doc_string, dict(v.metadata_props), v.shape is not None and v.shape.frozen))
    return seen


@pytest.mark.parametrize("name, proto", [("value-types", _value_types_model()), *_corpus()],
                         ids=["value-types", *(n for n, _ in _corpus())])
def test_value_types_read_apart_from_onnx_ir_are_onnx_irs(monkeypatch, name, proto):
    """Every value's type, shape (dims, denotations, frozen), doc string and metadata after load
    are what onnx-ir's deserializer gives when it reads every value_info entry itself."""
    data = proto.SerializeToString()
    ours = _value_types(load_model(data))
    monkeypatch.setattr(load, "_take_value_types", lambda graph: {})
    assert ours == _value_types(load_model(data))


#: every detached data type, each in raw bytes and in its typed field (helper.make_tensor's
#: two forms), with values at the type's edges
_DETACH_VALUES = [np.array(v, t) for v, t in [
    ([1.5, -0.0, np.inf, np.nan, 3e-45], F32), ([1e300, -2.5, np.nan], np.float64), ([1.5, -65504, np.inf], np.float16),
    ([-128, 0, 127], np.int8), ([-32768, 32767], np.int16), ([-2**31, 2**31 - 1], np.int32),
    ([-2**63, 2**63 - 1], I64), ([0, 255], np.uint8), ([0, 65535], np.uint16), ([0, 2**32 - 1], np.uint32),
    ([0, 2**64 - 1], np.uint64), ([True, False], np.bool_), ([1 + 2j, -3j], np.complex64), ([1e200 - 1j], np.complex128),
]]


@pytest.mark.parametrize("raw", [True, False])
@pytest.mark.parametrize("array", _DETACH_VALUES, ids=lambda a: str(a.dtype))
def test_detached_tensors_hold_what_onnx_ir_reads(array, raw):
    """Load's own reading of a proto tensor's bytes or typed field (``_detached``) gives the
    array, type and dtype that onnx-ir's ``numpy()`` gives, for every type it detaches."""
    array = array.reshape(1, -1)
    proto = helper.make_tensor("t", helper.np_dtype_to_tensor_dtype(array.dtype), array.shape,
                               array.tobytes() if raw else array.reshape(-1).tolist(), raw=raw)
    before = ir.serde.TensorProtoTensor(proto)
    after = load._detached(before)
    assert not isinstance(after, ir.serde.TensorProtoTensor)
    assert after.dtype == before.dtype and after.name == "t"
    got, want = after.numpy(), before.numpy()
    assert got.dtype == want.dtype and got.shape == want.shape == array.shape
    assert got.tobytes() == want.tobytes()


# --------------------------------------------------------------------------------------------
# long attribute lists read apart from onnx-ir's deserializer
# --------------------------------------------------------------------------------------------


def _long_list_model() -> onnx.ModelProto:
    ints = list(range(-3, 5000))
    floats = [float(np.float32(v)) for v in np.random.default_rng(0).standard_normal(3000)]
    nodes = [helper.make_node("Constant", [], ["a"], value_ints=ints),
             helper.make_node("Constant", [], ["b"], value_floats=floats),
             helper.make_node("Constant", [], ["c"], value_ints=[1, 2, 3])]  # short: onnx-ir's way
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info(n, t, None) for n, t in
                                                (("a", TensorProto.INT64), ("b", TensorProto.FLOAT),
                                                 ("c", TensorProto.INT64))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_long_attribute_lists_are_read_as_arrays_with_the_values_onnx_ir_gives(monkeypatch):
    """Lists over ``LONG_LIST`` values (tree ensembles' node and leaf arrays) are set on the IR
    attribute apart from onnx-ir's per-value conversion, as read-only int64 / float32 arrays of
    the values its tuples hold; the NodeView hands kernels the same Python lists either way,
    ``NodeView.array`` the array itself, the serializer writes the same proto, and the caller's
    proto is left as it was."""
    from ort_core.graph.view import GraphView

    proto = _long_list_model()
    before = proto.SerializeToString()
    taken = load._take_long_lists(copy.deepcopy(proto).graph)
    assert sorted(taken) == [(0, "value_ints"), (1, "value_floats")]
    fast = load_model(proto)
    assert proto.SerializeToString() == before
    monkeypatch.setattr(load, "LONG_LIST", 1 << 30)
    slow = load_model(proto)
    ints = list(fast.graph)[0].attributes["value_ints"].value
    floats = list(fast.graph)[1].attributes["value_floats"].value
    assert ints.dtype == np.int64 and floats.dtype == np.float32
    assert not ints.flags.writeable and not floats.flags.writeable
    assert tuple(ints.tolist()) == tuple(range(-3, 5000))
    for f, s in zip(fast.graph, slow.graph):
        for name, attr in s.attributes.items():
            got = f.attributes[name].value
            assert tuple(np.asarray(got).tolist()) == tuple(attr.value)
        assert ir.serde.serialize_node(f) == ir.serde.serialize_node(s)
    for f, s in zip(GraphView(fast.graph).nodes, GraphView(slow.graph).nodes):
        assert f.attributes == s.attributes
        for name, value in s.attributes.items():
            assert all(type(a) is type(b) for a, b in zip(f.attributes[name], value))
            dtype = np.int64 if name == "value_ints" else np.float32
            np.testing.assert_array_equal(f.array(name, dtype), np.asarray(value, dtype))
    assert GraphView(fast.graph).nodes[0].array("missing", np.int64) is None


def test_load_marks_a_graph_without_subgraphs_and_the_walk_then_stops_at_it():
    """``graphs`` skips its walk of the nodes' attributes where load found no subgraph (each
    pass walks, a 0.3 ms walk on a 1,300-node model); a model with an If keeps the walk, and
    its branches are found."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    plain = load_model(make_model([helper.make_node("Relu", ["x"], ["y"])], [x],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]))
    assert plain.graph.meta.get(load.NO_SUBGRAPHS) is True
    assert list(load.graphs(plain.graph)) == [plain.graph]

    def branch(op):
        return helper.make_graph([helper.make_node(op, ["x"], ["b"])], op, [],
                                 [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])])

    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    nested = load_model(make_model(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch("Relu"), else_branch=branch("Neg"))], [x, cond],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]))
    assert load.NO_SUBGRAPHS not in nested.graph.meta
    found = [g.name for g in load.graphs(nested.graph)]
    assert found[0] == nested.graph.name and sorted(found[1:]) == ["Neg", "Relu"]
