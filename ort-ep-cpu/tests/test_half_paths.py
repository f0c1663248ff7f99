"""float16 models: the kernels compute in float32 and round once, as onnxruntime does (its CPU
kernels take float32 and get float16 through inserted casts), and convert between the two by
compiled loops where numba is installed.

- The conversions (``_util.as_float32`` / ``as_dtype``) give numpy's values exactly: all 65,536
  float16 values, and float32 values at every rounding boundary, subnormal, overflow, inf, NaN.
- Softmax, FastGelu, QuickGelu, MaxPool, AveragePool, GlobalAveragePool, Conv, MatMul and Gemm
  with float16 inputs against onnxruntime: rtol/atol 2e-3 (a float16 step is 2^-11 relative,
  and float32 sums in another order can round to the neighbouring value); Softmax, whose sums
  are short, to within one float16 step on all but a few values.
- Pow with a constant exponent 3 is x * x * x, bit for bit onnxruntime's.
"""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from compiled_loops import use_compiled
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort
from ort_ep_cpu.kernels import _jit, _util


@pytest.mark.parametrize("compiled", [False, True])
def test_half_to_float32_every_value(compiled, monkeypatch):
    use_compiled(monkeypatch, compiled, "half_to_float")
    assert (_jit.half_to_float() is not None) == compiled  # (the arrays here are above its size floor)
    halves = np.arange(1 << 16, dtype=np.uint16).view(np.float16).reshape(256, 256)
    got = _util.as_float32(halves[:, ::2])  # a strided view too
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), halves[:, ::2].astype(np.float32).view(np.uint32))


@pytest.mark.parametrize("compiled", [False, True])
def test_float32_to_half_rounding(compiled, monkeypatch):
    use_compiled(monkeypatch, compiled, "float_to_half")
    assert (_jit.float_to_half() is not None) == compiled
    halves = np.arange(1 << 16, dtype=np.uint32)
    # each float16 value's float32 bits and the bits around the rounding boundary above it
    # (the tie, and one ulp either side of it), plus random bit patterns
    bits = np.concatenate([(halves << 13) + offset for offset in (0, 0xFFF, 0x1000, 0x1001, 0x1FFF)]
                          + [np.random.default_rng(0).integers(0, 1 << 32, 200_000, dtype=np.uint64).astype(np.uint32)])
    x = np.concatenate([np.arange(0, 1 << 32, 4099, dtype=np.uint64).astype(np.uint32), bits]).view(np.float32)
    got = _util.as_dtype(x, np.dtype(np.float16))
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint16), want[~nan].view(np.uint16))


def _model(nodes, inputs, outputs, initializers=(), opset=17, domains=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]
                              + [helper.make_opsetid(d, 1) for d in domains])
    model.ir_version = 8
    return model.SerializeToString()


def _half(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT16, shape)


def _both(data, feeds):
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    return got, want


def _cases():
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array((rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float16), "w")
    b = numpy_helper.from_array(rng.standard_normal(16).astype(np.float16), "b")
    wm = numpy_helper.from_array((rng.standard_normal((64, 96)) * 0.1).astype(np.float16), "wm")
    img = (rng.standard_normal((1, 8, 20, 20)) * 2).astype(np.float16)
    rows = (rng.standard_normal((6, 64)) * 2).astype(np.float16)
    return {
        "Softmax": ([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], {"x": rows}, []),
        "MaxPool": ([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2])], {"x": img}, []),
        "AveragePool": ([helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
                        {"x": img}, []),
        "GlobalAveragePool": ([helper.make_node("GlobalAveragePool", ["x"], ["y"])], {"x": img}, []),
        "Conv": ([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])], {"x": img}, [w, b]),
        "MatMul": ([helper.make_node("MatMul", ["x", "wm"], ["y"])], {"x": rows}, [wm]),
        "Gemm": ([helper.make_node("Gemm", ["x", "wm"], ["y"], alpha=0.5)], {"x": rows}, [wm]),
        "FastGelu": ([helper.make_node("FastGelu", ["x"], ["y"], domain="com.microsoft")], {"x": rows}, []),
        "QuickGelu": ([helper.make_node("QuickGelu", ["x"], ["y"], domain="com.microsoft")], {"x": rows}, []),
    }


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("op", list(_cases()))
def test_half_ops_match_onnxruntime(op, compiled, monkeypatch):
    use_compiled(monkeypatch, compiled, "half_to_float")
    nodes, feeds, initializers = _cases()[op]
    data = _model(nodes, [_half("x", list(feeds["x"].shape))], [_half("y", None)], initializers,
                  domains=("com.microsoft",) if nodes[0].domain else ())
    (got,), (want,) = _both(data, feeds)
    assert got.dtype == np.float16 and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=2e-3)
    if op == "Softmax":  # float32 exponentials and sums, one rounding: onnxruntime's values
        assert np.count_nonzero(got != want) <= 4


@pytest.mark.parametrize("dtype,elem", [(np.float32, TensorProto.FLOAT), (np.float64, TensorProto.DOUBLE)])
def test_pow_cube_is_onnxruntimes_product(dtype, elem):
    e = numpy_helper.from_array(np.array(3.0, dtype), "e")
    data = _model([helper.make_node("Pow", ["x", "e"], ["y"])], [helper.make_tensor_value_info("x", elem, [4, 512])],
                  [helper.make_tensor_value_info("y", elem, None)], [e])
    x = (np.random.default_rng(5).standard_normal((4, 512)) * 10).astype(dtype)
    (got,), (want,) = _both(data, {"x": x})
    np.testing.assert_array_equal(got, want)  # numpy's power differed on 4,802 of 16,384 values


# ---- float32 regions (half_region.py): where onnxruntime rounds to float16, and where not ----

def _consts(**arrays):
    return [numpy_helper.from_array(np.asarray(v, np.float16), k) for k, v in arrays.items()]


def _region_nodes(session) -> list[str]:
    return [p.name for p in session.get_placement().nodes if p.group is not None and "float16 region" in p.note and not p.graph]


def test_region_rounds_only_where_onnxruntime_does():
    """Mul -> Add -> Reshape -> Div: onnxruntime computes all four in float32 (the Reshape, a
    float16 kernel alone between float32 ops, too) and rounds once at the output; a Transpose
    whose output is also a graph output keeps its float16 rounding. Exact arithmetic both
    sides, so the values must be onnxruntime's to the bit (rounding at every node: 1,500-odd
    of 4,096 differ)."""
    nodes = [helper.make_node("Mul", ["x", "a"], ["m"]), helper.make_node("Add", ["m", "b"], ["s"]),
             helper.make_node("Reshape", ["s", "shape"], ["r"]), helper.make_node("Div", ["r", "c"], ["d"]),
             helper.make_node("Transpose", ["d"], ["t"], perm=[1, 0]), helper.make_node("Mul", ["t", "a2"], ["y"])]
    shape = numpy_helper.from_array(np.array([64, 64], np.int64), "shape")
    initializers = _consts(a=1.37, b=0.613, c=2.91, a2=0.77) + [shape]
    data = _model(nodes, [_half("x", [16, 256])], [_half("y", None), _half("t", None)], initializers)
    x = np.random.default_rng(7).standard_normal((16, 256)).astype(np.float16) * 5
    (got_y, got_t), (want_y, want_t) = _both(data, {"x": x})
    np.testing.assert_array_equal(got_t.view(np.uint16), want_t.view(np.uint16))
    np.testing.assert_array_equal(got_y.view(np.uint16), want_y.view(np.uint16))
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    assert len(_region_nodes(session)) == 4  # Mul, Add, Reshape, Div; the Transpose feeds an output


def test_region_drops_a_cast_to_float16_as_onnxruntime_does():
    """A float32 input Cast to float16 and read by a float32 op: onnxruntime drops the model's
    rounding along with its own cast back to float32, so Mul sees the float32 input; a Cast to
    float32 of a float32 op's output reads it unrounded too."""
    nodes = [helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16), helper.make_node("Mul", ["h", "a"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["s"]), helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT)]
    data = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 512])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], _consts(a=1.37, b=0.613))
    x = np.random.default_rng(8).standard_normal((8, 512)).astype(np.float32) * 3
    (got,), (want,) = _both(data, {"x": x})
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)


def test_float16_attention_function_is_onnxruntimes():
    """The ONNX backend case test_attention_4d_causal_fp16_expanded (Attention-23's function
    body: Mul, MatMul, Cast, Add, Softmax, Where, MatMul in float16, with casts): onnxruntime
    computes the chain in float32 and rounds once. Node by node, 21 of its 192 outputs differed
    from onnxruntime's, 2 by more than the case's tolerance."""
    from ort_core.testing.conformance import _node_cases

    case = next(c for c in _node_cases() if c.name == "test_attention_4d_causal_fp16_expanded")
    data = case.model.SerializeToString()
    reference = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    inputs, _ = case.data_sets[0]
    feeds = {i.name: v for i, v in zip(reference.get_inputs(), inputs)}
    (got,), (want,) = (ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds),
                       reference.run(None, feeds))
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_region_outputs_keep_their_types():
    """A region output that is not float16 (ArgMax's int64, Equal's bool) comes out as is; a
    float16 one is rounded; both match onnxruntime."""
    nodes = [helper.make_node("Mul", ["x", "a"], ["m"]), helper.make_node("ArgMax", ["m"], ["i"], axis=1),
             helper.make_node("Equal", ["m", "b"], ["e"]), helper.make_node("Add", ["m", "b"], ["y"])]
    data = _model(nodes, [_half("x", [4, 300])],
                  [helper.make_tensor_value_info("i", TensorProto.INT64, None),
                   helper.make_tensor_value_info("e", TensorProto.BOOL, None), _half("y", None)],
                  _consts(a=1.37, b=0.5))
    x = np.random.default_rng(9).standard_normal((4, 300)).astype(np.float16)
    got, want = _both(data, {"x": x})
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_region_that_cannot_be_built_runs_node_by_node(monkeypatch, caplog):
    """A region whose float32 graph fails (here: made to) runs its members one by one, in
    float16, with a warning naming it; the session is not lost."""
    from ort_ep_cpu.kernels import half_region

    def broken(request):
        raise RuntimeError("no float32 graph today")

    monkeypatch.setattr(half_region, "_float32_graph", broken)
    nodes = [helper.make_node("Mul", ["x", "a"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])]
    data = _model(nodes, [_half("x", [4, 64])], [_half("y", None)], _consts(a=1.37, b=0.613))
    x = np.random.default_rng(10).standard_normal((4, 64)).astype(np.float16)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": x})[0]
    want = ((x * np.float16(1.37)).astype(np.float16) + np.float16(0.613)).astype(np.float16)  # rounded at each node
    np.testing.assert_array_equal(got, want)
    assert "no float32 graph today" in caplog.text
    assert {p.note for p in session.get_placement().nodes} == {half_region.NOTE_BY_NODE}
