"""Every family-A op at every opset version (1..28) and every tensor type its schema allows,
on random inputs, against onnx.reference.ReferenceEvaluator.

Tolerances: rtol 1e-3 / atol 1e-5 (onnx's rtol), exact for integers and booleans. For float16
and bfloat16 a result also passes when it matches the reference computed in float32 and rounded
once to the low type within two ULPs (rtol 2**-9 and 2**-6): onnx.reference evaluates some ops
(function bodies such as Gelu, Mean's running sum) in the low type step by step, which is less
accurate than one rounding at the end, which is what these kernels do.

Combinations where onnx.reference itself departs from the spec are listed in ``REFERENCE_WRONG``
with the reason, and checked another way in test_family_a_semantics.py.
"""

from __future__ import annotations

import warnings
import zlib

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, defs, helper
from onnx.reference import ReferenceEvaluator

import ort_core as ort

conformance = pytest.importorskip("ort_core.testing.conformance")

UNARY = ["Abs", "Neg", "Sign", "Floor", "Ceil", "Reciprocal", "Sqrt", "Exp", "Log", "Tanh", "Sin", "Cos",
         "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Round", "Erf", "Sigmoid",
         "Relu", "LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "Softplus", "Softsign",
         "Mish", "ThresholdedRelu", "Shrink", "Swish", "Gelu", "IsNaN", "IsInf", "Not", "Softmax",
         "LogSoftmax", "Hardmax", "Det"]
BINARY = ["Add", "Sub", "Mul", "Div", "Pow", "Mod", "Equal", "Less", "Greater", "LessOrEqual",
          "GreaterOrEqual", "And", "Or", "Xor", "PRelu"]
VARIADIC = ["Max", "Min", "Sum", "Mean"]
REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]
OTHER = ["ArgMax", "ArgMin", "CumSum", "Clip", "Where", "Cast", "CastLike"]

# (op, first opset of the schema version or None for all, input type) -> why the reference is wrong
REFERENCE_WRONG = {
    ("Softmax", 1, None): "onnx.reference ignores the 2-D coercion of opsets before 13",
    ("Softmax", 11, None): "onnx.reference ignores the 2-D coercion of opsets before 13",
    ("LogSoftmax", 1, None): "onnx.reference ignores the 2-D coercion of opsets before 13",
    ("LogSoftmax", 11, None): "onnx.reference ignores the 2-D coercion of opsets before 13",
    ("Hardmax", 1, None): "onnx.reference ignores the 2-D coercion of opsets before 13",
    ("Hardmax", 11, None): "onnx.reference ignores the 2-D coercion of opsets before 13",
    ("ReduceSumSquare", None, "tensor(int32)"): "onnx.reference returns int64, the spec says T",
    ("ReduceSumSquare", None, "tensor(uint32)"): "onnx.reference returns uint64, the spec says T",
    ("Det", None, "tensor(bfloat16)"): "onnx.reference returns float64, the spec says T",
}

_TYPES: dict[str, tuple[int, np.dtype]] = {"tensor(string)": (TensorProto.STRING, np.dtype(object))}
for _name, _value in TensorProto.DataType.items():
    try:
        _TYPES[f"tensor({_name.lower()})"] = (_value, np.dtype(helper.tensor_dtype_to_np_dtype(_value)))
    except Exception:  # UNDEFINED and types numpy cannot hold
        pass


def _versions(op: str) -> list[int]:
    found: list[int] = []
    for v in range(1, 29):
        try:
            since = defs.get_schema(op, v).since_version
        except defs.SchemaError:
            continue
        if since not in found:
            found.append(since)
    return found


def _allowed(schema, type_param: str) -> list[str]:
    for c in schema.type_constraints:
        if c.type_param_str == type_param:
            return [t for t in c.allowed_type_strs if t in _TYPES]
    return [type_param] if type_param in _TYPES else []


def _random(rng, dtype: np.dtype, shape, op: str) -> np.ndarray:
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind == "O":
        return np.array([str(v) for v in rng.standard_normal(int(np.prod(shape)))], dtype=object).reshape(shape)
    if dtype.kind in "iu":
        lo, hi = (0, 6) if dtype.kind == "u" or op == "Pow" else (-6, 6)
        if op in ("Div", "Mod"):
            lo, hi = 1, 6
        return rng.integers(lo, hi, shape).astype(dtype)
    x = rng.standard_normal(shape) * 2
    if op == "Acosh":
        x = np.abs(x) + 1
    elif op in ("Asin", "Acos", "Atanh"):
        x = np.tanh(x)
    elif op in ("Log", "Sqrt", "ReduceLogSum", "Pow"):
        x = np.abs(x) + 0.1
    elif op in ("Div", "Mod", "Reciprocal"):
        x = np.where(np.abs(x) < 0.2, 1.0, x)
    return x.astype(dtype)


def _model(op: str, opset: int, inputs: list[np.ndarray], attrs: dict) -> onnx.ModelProto | None:
    names = [f"x{k}" for k in range(len(inputs))]
    infos = [helper.make_tensor_value_info(n, _TYPES["tensor(string)"][0] if x.dtype == object
                                           else helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
             for n, x in zip(names, inputs)]
    graph = helper.make_graph([helper.make_node(op, names, ["y"], **attrs)], op, infos,
                              [helper.make_value_info("y", onnx.TypeProto())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except Exception:  # a combination the schema's inference refuses: not a valid model
        return None
    out = model.graph.output[0]
    out.CopyFrom(inferred.graph.output[0])
    if not out.type.tensor_type.elem_type:  # opset-1 schemas infer no type
        to = attrs.get("to")
        out.type.tensor_type.elem_type = (
            TensorProto.DataType.Value(to) if isinstance(to, str) else infos[0].type.tensor_type.elem_type
        )
    if not out.type.tensor_type.HasField("shape"):
        out.type.tensor_type.shape.SetInParent()
    return model


def _cases(op: str):
    """(opset, type label, inputs, attrs) for every schema version and allowed type of ``op``."""
    rng = np.random.default_rng(zlib.crc32(op.encode()))  # stable across processes, unlike hash()
    for v in _versions(op):
        schema = defs.get_schema(op, v)
        first = schema.inputs[0]
        for ts in _allowed(schema, first.type_str):
            dt = _TYPES[ts][1]
            shape = (2, 3, 4) if op != "Det" else (2, 3, 3)
            attrs: dict = {}
            if op == "Mod" and (dt.kind == "f" or dt.type.__module__ == "ml_dtypes"):
                attrs["fmod"] = 1
            if op in UNARY:
                yield v, ts, [_random(rng, dt, shape, op)], attrs
            elif op in BINARY:
                t2 = dt
                if op == "Pow" and schema.inputs[1].type_str != first.type_str:
                    t2 = _TYPES[_allowed(schema, schema.inputs[1].type_str)[0]][1]
                second = (4,) if op == "PRelu" else shape[1:]
                yield v, ts, [_random(rng, dt, shape, op), _random(rng, t2, second, op)], attrs
            elif op in VARIADIC:
                if v < 8:  # no broadcasting before opset 8
                    yield v, ts, [_random(rng, dt, shape, op), _random(rng, dt, shape, op)], attrs
                else:
                    yield v, ts, [_random(rng, dt, shape, op), _random(rng, dt, shape[1:], op),
                                  _random(rng, dt, (4,), op)], attrs
            elif op in REDUCE:
                x = _random(rng, dt, shape, op)
                if len(schema.inputs) > 1:
                    yield v, ts, [x, np.array([0, -1], dtype=np.int64)], {"keepdims": 0}
                else:
                    yield v, ts, [x], {"keepdims": 0, "axes": [0, -1]}
            elif op in ("ArgMax", "ArgMin"):
                attrs = {"axis": 1, **({"select_last_index": 1} if v >= 12 else {})}
                yield v, ts, [_random(rng, dt, shape, op)], attrs
            elif op == "CumSum":
                yield v, ts, [_random(rng, dt, shape, op), np.array(1, dtype=np.int64)], {"exclusive": 1, "reverse": 1}
            elif op == "Clip":
                x = _random(rng, dt, shape, op)
                if v < 11:
                    yield v, ts, [x], {"min": -1.0, "max": 1.0}
                else:
                    lo = np.array(0 if dt.kind == "u" else -1.0, dtype=np.float64).astype(dt)
                    yield v, ts, [x, lo, np.array(3.0).astype(dt)], attrs
            elif op == "Where":
                # the type constraint of Where is on its second input
                pass
            elif op in ("Cast", "CastLike"):
                out_types = _allowed(schema, schema.outputs[0].type_str)
                for to_str in out_types:
                    to, to_dt = _TYPES[to_str]
                    x = _random(rng, dt, shape, "Cast")
                    if op == "Cast":
                        yield v, f"{ts}->{to_str}", [x], {"to": to if v > 1 else TensorProto.DataType.Name(to)}
                    else:
                        like = np.array(["a"], dtype=object) if to_dt.kind == "O" else np.zeros((1,), dtype=to_dt)
                        yield v, f"{ts}->{to_str}", [x, like], {}
        if op == "Where":
            for ts in _allowed(schema, schema.inputs[1].type_str):
                dt = _TYPES[ts][1]
                yield v, ts, [rng.integers(0, 2, (2, 3, 4)).astype(bool), _random(rng, dt, (2, 3, 4), op),
                              _random(rng, dt, (3, 4), op)], {}


def _half_rtol(dtype: np.dtype) -> float | None:
    if dtype == np.float16:
        return 2.0**-9
    if dtype == ml_dtypes.bfloat16:
        return 2.0**-6
    return None


def _check(op: str, v: int, label: str, inputs, attrs) -> str | None:
    """None when ours matches the reference, else what differs."""
    model = _model(op, v, inputs, attrs)
    if model is None:
        return None
    feeds = {f"x{k}": x for k, x in enumerate(inputs)}
    try:
        ref = ReferenceEvaluator(model).run(None, feeds)[0]
    except Exception:  # the reference cannot run it: ours must still run and give the declared type
        ref = None
    ours = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    want = model.graph.output[0].type.tensor_type.elem_type
    got = TensorProto.STRING if ours.dtype == object else helper.np_dtype_to_tensor_dtype(ours.dtype)
    if got != want:
        return f"output type {TensorProto.DataType.Name(got)}, declared {TensorProto.DataType.Name(want)}"
    if ref is None:
        return None
    if ours.dtype == object and inputs[0].dtype != object:
        # numbers written as text: onnx.reference writes numpy's str(), ort-core onnxruntime's
        # %.8g, NaN / INF and 1 / 0 (test_cast_to_string_writes_numbers_as_onnxruntime)
        return None
    try:
        conformance.compare_value(np.asarray(ref), ours, 1e-3, 1e-5)
        return None
    except AssertionError as exc:
        direct = str(exc)
    rtol = _half_rtol(inputs[0].dtype)
    if rtol is None:
        return direct
    # the reference in float32, rounded once to the low type
    wide = [x.astype(np.float32) if x.dtype == inputs[0].dtype else x for x in inputs]
    wide_model = _model(op, v, wide, attrs)
    ref32 = ReferenceEvaluator(wide_model).run(None, {f"x{k}": x for k, x in enumerate(wide)})[0]
    ref32 = np.asarray(ref32).astype(ours.dtype)
    try:
        conformance.compare_value(ref32, ours, rtol, 1e-5)
        return None
    except AssertionError as exc:
        return f"{direct}; against float32: {exc}"


def _known(op: str, v: int, label: str) -> str | None:
    type_label = label.split("->")[0]
    for key in ((op, v, None), (op, None, type_label), (op, v, type_label)):
        if key in REFERENCE_WRONG:
            return REFERENCE_WRONG[key]
    return None


@pytest.mark.parametrize("op", UNARY + BINARY + VARIADIC + REDUCE + OTHER)
def test_every_opset_and_type(op):
    failures = []
    count = 0
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for v, label, inputs, attrs in _cases(op):
            if _known(op, v, label):
                continue
            count += 1
            try:
                problem = _check(op, v, label, inputs, attrs)
            except Exception as exc:  # our session or kernel raised
                problem = f"{type(exc).__name__}: {str(exc)[-300:]}"
            if problem:
                failures.append(f"{op}-{v} {label}: {problem[:300]}")
    assert count > 0, f"no combinations generated for {op}"
    assert not failures, f"{len(failures)}/{count} combinations differ:\n" + "\n".join(failures)
