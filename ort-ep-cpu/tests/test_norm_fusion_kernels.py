"""The CPU kernel for com.microsoft SkipLayerNormalization against onnxruntime's own kernel for
the same node, and the norm fusions end to end through an ort-core session with the CPU
provider (the gate lets them fire because this provider claims the fused nodes).

Tolerances: float32 rtol 1e-5 / atol 1e-5; float16 rtol 1e-3 / atol 2e-3 (both kernels sum in
float32 and round once to float16: one float16 ulp apart at most); float64 against
onnx.reference running the decomposed form in float64: rtol 1e-12 / atol 1e-12; whole models
rtol 1e-4 / atol 1e-5.
"""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime
import pytest
from compiled_loops import use_compiled
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from real_model_cases import fetch_or_skip

import ort_core as ort
from ort_core.testing import models
from ort_ep_cpu import threads

RNG = np.random.default_rng(0)
H = 32
ELEM = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.float64: TensorProto.DOUBLE}
TOL = {np.float32: {"rtol": 1e-5, "atol": 1e-5}, np.float16: {"rtol": 1e-3, "atol": 2e-3}}


def _f(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _sln_model(x_shape, skip_shape, dtype, *, beta=True, bias=True, outputs=("y",), epsilon=1e-5):
    elem = ELEM[dtype]
    names = ["x", "skip", "gamma", "beta" if beta else "", "bias" if bias else ""]
    while not names[-1]:
        names.pop()
    attrs = {} if epsilon is None else {"epsilon": epsilon}
    node = helper.make_node("SkipLayerNormalization", names, list(outputs), domain="com.microsoft", name="sln", **attrs)
    stat_shape = list(x_shape[:-1]) + [1]
    out_info = {"y": (elem, x_shape), "mean": (TensorProto.FLOAT, stat_shape),
                "inv_std": (TensorProto.FLOAT, stat_shape), "sum": (elem, x_shape)}
    shapes = {"x": x_shape, "skip": skip_shape, "gamma": [H], "beta": [H], "bias": [H]}
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, elem, shapes[n]) for n in names if n],
        [helper.make_tensor_value_info(o, *out_info[o]) for o in outputs if o],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    feeds = {n: _f(*shapes[n], dtype=dtype) for n in names if n}
    return model.SerializeToString(), feeds


def _cpu_session(data, so=None):
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def _same_as_onnxruntime(data, feeds, tol):
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    sess = _cpu_session(data)
    assert [p.op_type for p in sess.get_placement().nodes] == ["SkipLayerNormalization"]
    got = sess.run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), **tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("outputs", [("y",), ("y", "mean", "inv_std", "sum"), ("y", "", "", "sum")],
                         ids=["output", "all", "output+sum"])
@pytest.mark.parametrize("beta,bias", [(True, True), (False, False), (True, False)], ids=["beta+bias", "neither", "beta"])
@pytest.mark.parametrize("compiled", [False, True], ids=["numpy", "compiled"])
def test_skip_layernorm_matches_onnxruntime(dtype, outputs, beta, bias, compiled, monkeypatch):
    used = use_compiled(monkeypatch, compiled, "layer_norm_rows")
    data, feeds = _sln_model([2, 7, H], [2, 7, H], dtype, beta=beta, bias=bias, outputs=outputs)
    _same_as_onnxruntime(data, feeds, TOL[dtype])
    # the compiled rows: float32, and no mean / inv_std output (they give none)
    assert bool(used) == (compiled and dtype == np.float32 and "mean" not in outputs)


@pytest.mark.parametrize("compiled", [False, True], ids=["numpy", "compiled"])
@pytest.mark.parametrize("shape, axis, bias", [((3, 5, H), -1, True), ((4, 100), 1, False), ((2, 3, 8), 1, True)])
def test_layernorm_matches_onnxruntime(compiled, shape, axis, bias, monkeypatch):
    used = use_compiled(monkeypatch, compiled, "layer_norm_rows")
    names = ["x", "scale", "bias"] if bias else ["x", "scale"]
    node = helper.make_node("LayerNormalization", names, ["y"], axis=axis, epsilon=1e-5)
    inits = [numpy_helper.from_array(_f(*shape[axis:]), "scale")] + ([numpy_helper.from_array(_f(*shape[axis:]), "bias")]
                                                                       if bias else [])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))], inits)
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    x = _f(*shape) * 3 + 1
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = _cpu_session(data).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, **TOL[np.float32])
    assert bool(used) == (compiled and axis in (-1, len(shape) - 1))  # the compiled rows: the last axis only


@pytest.mark.parametrize("outputs", [("y",), ("y", "", "", "sum")], ids=["output", "output+sum"])
def test_skip_layernorm_rows_split_over_threads(outputs, monkeypatch):
    """From ``_jit.SPLIT_MIN_ELEMENTS`` values the compiled rows split into blocks on the
    session's threads (a (1, 400, 384) audio transformer's: 124 us each on one thread):
    onnxruntime's values, the sum output too."""
    used = use_compiled(monkeypatch, True, "layer_norm_rows")
    data, feeds = _sln_model([1, 2100, H], [1, 2100, H], np.float32, outputs=outputs)
    _same_as_onnxruntime(data, feeds, TOL[np.float32])
    assert used == [(min(2, threads.usable()),)]


@pytest.mark.parametrize("x_shape,skip_shape", [([7, H], [7, H]), ([3, 7, H], [1, 7, H]), ([3, 7, H], [7, H])])
def test_skip_layernorm_shapes_onnxruntime_takes(x_shape, skip_shape):
    """2-D input, and a skip broadcast over the batch."""
    data, feeds = _sln_model(x_shape, skip_shape, np.float32, outputs=("y", "", "", "sum"))
    _same_as_onnxruntime(data, feeds, TOL[np.float32])


def test_skip_layernorm_default_epsilon_is_onnxruntimes():
    data, feeds = _sln_model([2, 3, H], [2, 3, H], np.float32, epsilon=None)
    feeds["x"] = np.full((2, 3, H), 0.5, np.float32)  # zero variance: the output is beta, scaled by eps
    feeds["x"][..., ::2] += 1e-4
    feeds["skip"] = np.zeros_like(feeds["skip"])
    _same_as_onnxruntime(data, feeds, TOL[np.float32])


def test_skip_layernorm_float64_matches_the_decomposed_form():
    """onnxruntime's schema has no double; onnx.reference runs Add + the LayerNorm arithmetic in float64."""
    data, feeds = _sln_model([2, 5, H], [2, 5, H], np.float64, outputs=("y", "mean", "inv_std", "sum"), epsilon=1e-6)
    got = _cpu_session(data).run(None, feeds)
    nodes = [
        helper.make_node("Add", ["x", "skip"], ["s0"]), helper.make_node("Add", ["s0", "bias"], ["sum"]),
        helper.make_node("ReduceMean", ["sum"], ["mean"], axes=[-1]), helper.make_node("Sub", ["sum", "mean"], ["d"]),
        helper.make_node("Mul", ["d", "d"], ["sq"]), helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["std"]),
        helper.make_node("Reciprocal", ["std"], ["inv_std"]), helper.make_node("Mul", ["d", "inv_std"], ["n"]),
        helper.make_node("Mul", ["n", "gamma"], ["g"]), helper.make_node("Add", ["g", "beta"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "ref", [helper.make_tensor_value_info(n, TensorProto.DOUBLE, None) for n in feeds],
        [helper.make_tensor_value_info(n, TensorProto.DOUBLE, None) for n in ("y", "mean", "inv_std", "sum")],
        [numpy_helper.from_array(np.array(1e-6), "eps")],
    )
    want = ReferenceEvaluator(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])).run(None, feeds)
    assert [g.dtype for g in got] == [np.float64] * 4
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_skip_layernorm_gamma_of_the_wrong_length_is_named():
    data, feeds = _sln_model([2, 3, H], [2, 3, H], np.float32)
    feeds["gamma"] = _f(H - 1)
    with pytest.raises(Exception, match="gamma"):
        _cpu_session(data).run(None, feeds)


def test_skip_layernorm_integer_input_is_declined_with_the_reason():
    from ort_ep_cpu.registry import decline_reason

    data, _ = _sln_model([2, 3, H], [2, 3, H], np.float32)
    model = onnx.load_from_string(data)
    for value in model.graph.input:
        value.type.tensor_type.elem_type = TensorProto.INT32
    view = ort.GraphView(ir.serde.deserialize_model(model).graph)
    reason = decline_reason(view.nodes[0])
    assert reason is not None and "SkipLayerNormalization 'sln'" in reason and "float32" in reason


# --------------------------------------------------------------------------------- end to end


def _optimized(model: onnx.ModelProto, tmp_path, level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    sess = _cpu_session(model.SerializeToString(), so)
    return sess, onnx.load(so.optimized_model_filepath)


@pytest.mark.parametrize("batch", [1, 8])
def test_transformer_runs_skip_layernorm_and_bias_gelu(tmp_path, batch):
    model = models.transformer()
    sess, written = _optimized(model, tmp_path)
    counts = collections.Counter(n.op_type for n in written.graph.node)
    assert counts["SkipLayerNormalization"] == 5 and counts["LayerNormalization"] == 0, counts
    assert counts["BiasGelu"] == 2 and counts["Gelu"] == 0, counts
    placed = collections.Counter(p.op_type for p in sess.get_placement().nodes)
    assert placed["SkipLayerNormalization"] == 5 and placed["BiasGelu"] == 2
    feeds = models.random_inputs(model, batch=batch)
    want = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(sess.run(None, feeds)[0], want[0], rtol=1e-4, atol=1e-5)
    # the written model loads in onnxruntime (its contrib ops, same inputs and attributes)
    again = onnxruntime.InferenceSession(str(tmp_path / "optimized.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(again.run(None, feeds)[0], want[0], rtol=1e-4, atol=1e-5)


def _decomposed_ln_model(opset: int) -> onnx.ModelProto:
    """y = LayerNorm(x) written out as torch.onnx did before opset 17, then Relu."""
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mu"], axes=[-1]), helper.make_node("Sub", ["x", "mu"], ["d"]),
        helper.make_node("Pow", ["d", "two"], ["sq"]), helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["std"]),
        helper.make_node("Div", ["d", "std"], ["n"]), helper.make_node("Mul", ["n", "gamma"], ["g"]),
        helper.make_node("Add", ["g", "beta"], ["ln"]), helper.make_node("Relu", ["ln"], ["y"]),
    ]
    inits = [numpy_helper.from_array(v, k) for k, v in
             (("two", np.array(2, np.float32)), ("eps", np.array(1e-5, np.float32)), ("gamma", _f(H)), ("beta", _f(H)))]
    graph = helper.make_graph(nodes, "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6, H])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 6, H])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("opset,level,domain", [
    (17, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, ""), (12, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.CORE_DOMAIN),
    (12, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, None),
])
def test_decomposed_layernorm_is_fused(tmp_path, opset, level, domain):
    """The standard op from opset 17 (EXTENDED); below it ort-core's own, at ALL only."""
    model = _decomposed_ln_model(opset)
    sess, written = _optimized(model, tmp_path, level)
    ops = [(n.domain, n.op_type) for n in written.graph.node]
    if domain is None:
        assert "LayerNormalization" not in {op for _, op in ops} and ("", "ReduceMean") in ops
    else:
        assert ops == [(domain, "LayerNormalization"), ("", "Relu")]
    x = _f(3, 6, H) * 4
    want = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want[0], rtol=1e-4, atol=1e-5)


def test_no_fusion_below_extended(tmp_path):
    model = models.transformer()
    _, written = _optimized(model, tmp_path, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
    ops = {n.op_type for n in written.graph.node}
    assert not ops & {"SkipLayerNormalization", "BiasGelu"} and "LayerNormalization" in ops


@pytest.mark.parametrize("opset", [12, 17])
def test_ocr_rec_layernorms_fuse(tmp_path, opset):
    """PP-OCRv4 rec writes its 5 LayerNorms out (opset 12). All are fused: at its own opset into
    ort-core's LayerNormalization (its Reshapes leave the residual sums without inferred shapes,
    so whether SkipLayerNormalization's shape rule holds is unknown: none is made), converted to
    opset 17 (onnx's version converter) 4 after a residual Add into SkipLayerNormalization and 1
    into the standard LayerNormalization; outputs as onnxruntime's on the same model."""

    from onnx import version_converter

    path = fetch_or_skip("ocr-rec")
    model = onnx.load(str(path))
    if opset != 12:
        model = version_converter.convert_version(model, opset)
    sess, written = _optimized(model, tmp_path)
    counts = collections.Counter(n.op_type for n in written.graph.node)
    assert counts["SkipLayerNormalization"] + counts["LayerNormalization"] == 5, counts
    assert counts["SkipLayerNormalization"] >= (4 if opset >= 17 else 0) and counts["ReduceMean"] == 0, counts
    x = np.random.default_rng(0).random((1, 3, 48, 320), dtype=np.float32)
    want = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want[0], rtol=1e-4, atol=1e-5)


def test_compiled_layer_norm_checks_each_new_parameter_array_once():
    """``reduce.CompiledLayerNorm`` checks bias, gamma and beta for the arrays last seen, not at
    every call: arrays not seen before are checked again (a gamma of another length, or a
    strided one, is declined: None, the numpy path runs), and the fit ones give the LayerNorm
    of 2-D and 3-D inputs."""
    from ort_ep_cpu.kernels import _jit, reduce

    if not _jit.enabled():
        pytest.skip("numba is not installed: no compiled rows")
    norm = reduce.CompiledLayerNorm(1e-5)
    gamma, beta = _f(H), _f(H)

    def want(x):
        mean = x.mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * gamma + beta

    for x in (_f(3, H), _f(2, 5, H)):
        y, total = norm(x, None, None, gamma, beta, total=False)
        assert total is None and y.shape == x.shape
        np.testing.assert_allclose(y, want(x), rtol=1e-5, atol=1e-5)
    assert norm.fit[1] is gamma
    assert norm(_f(3, H), None, None, _f(H + 1), beta, total=False) is None  # another gamma: checked
    assert norm(_f(3, H), None, None, _f(2 * H)[::2], beta, total=False) is None  # strided
    assert norm(_f(3, H + 1), None, None, gamma, beta, total=False) is None  # the fit ones at another length
    y, _ = norm(x, None, None, gamma, beta, total=False)
    np.testing.assert_allclose(y, want(x), rtol=1e-5, atol=1e-5)
