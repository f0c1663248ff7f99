"""In-place outputs (inplace.py): where elementwise kernels write into an input's buffer, where
they must not, and parity with onnxruntime with it on.

Sharing is observed with a tracer plugin around ``ort_create_kernel`` that keeps each CPU
kernel's arguments and result of its last call (``np.shares_memory``). Tolerances: bit-equal
between in-place and out-of-place runs of the same model; rtol 1e-4 / atol 1e-5 against
onnxruntime on small and generated models, 1e-3 / 1e-4 on the real ones (BLAS summation order).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from real_model_cases import fetch_or_skip

import ort_core as ort
from ort_core.testing import models
from ort_ep_cpu import inplace
from ort_ep_cpu.kernels import onednn_group

onnxruntime = pytest.importorskip("onnxruntime")

CPU = "CPUExecutionProvider"
F = TensorProto.FLOAT
MS = "com.microsoft"
RNG = np.random.default_rng(7)


def _f32(*shape, positive=False):
    x = np.asarray(RNG.standard_normal(shape), dtype=np.float32)
    return np.asarray(np.abs(x) + np.float32(0.5)) if positive else x


class ArrayTracer:
    """Keeps the arguments and result of every CPU kernel's last call, by node name."""

    plugin_name = "inplace-array-tracer"

    def __init__(self):
        self.calls: dict[str, tuple[tuple, object]] = {}

    @ort.hookimpl(wrapper=True)
    def ort_create_kernel(self, ep, request):
        kernel = yield
        if kernel is None or ep.name != CPU or request.fused:
            return kernel
        name, run, calls = request.node.name, kernel.run, self.calls

        def traced(*args):
            result = run(*args)
            calls[name] = (args, result)
            return result

        return dataclasses.replace(kernel, run=traced)

    def shares(self, node: str, k: int) -> bool:
        """Whether node's result is in the buffer of its input ``k``."""
        args, result = self.calls[node]
        return np.shares_memory(result, args[k])

    def in_place_count(self) -> int:
        return sum(
            any(isinstance(a, np.ndarray) and isinstance(r, np.ndarray) and np.shares_memory(r, a) for a in args)
            for args, r in self.calls.values()
        )


@pytest.fixture(autouse=True)
def single_node_kernels(monkeypatch):
    """These tests follow the buffers of single-node kernels: no oneDNN groups (a group's nodes
    run inside one kernel, onednn_group.py), and tensors of any size written in place (their
    small ones would otherwise be computed out of place: ``INPLACE_MIN_ELEMENTS``)."""
    monkeypatch.setattr(onednn_group, "groups", lambda graph, claimed: [])
    monkeypatch.setattr(inplace, "INPLACE_MIN_ELEMENTS", 0)


@pytest.fixture
def tracer():
    plugin = ArrayTracer()
    assert ort.register(plugin, plugin.plugin_name)
    yield plugin
    ort.unregister(plugin)


def _model(nodes, inputs, outputs, inits=(), opset=17, ms=False, domain=""):
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, F, []) for n in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits],
    )
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(MS, 1)] if ms else [])
    if domain not in ("", MS):
        opsets.append(helper.make_opsetid(domain, 1))
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model.SerializeToString()


def _session(data, enable=True, level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL, providers=None):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    cpu = (CPU, {"enable_inplace": "1" if enable else "0"})
    return ort.InferenceSession(data, so, providers=[*(providers or []), cpu])


def _expect_onnxruntime(data, feeds, got, rtol=1e-4, atol=1e-5):
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


W = _f32(4, 3, 3, 3)
B = _f32(4)
CONV = helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1])
CONV_INPUTS = [("x", [1, 3, 8, 8])]
CONV_INITS = [("w", W), ("b", B)]


# --------------------------------------------------------------------------------------------
# in place where it is safe
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("skip_first", [False, True])
def test_conv_relu_add_chain_runs_in_place(tracer, skip_first):
    add_inputs = ["skip", "r"] if skip_first else ["r", "skip"]
    data = _model(
        [CONV, helper.make_node("Relu", ["c"], ["r"], name="relu"), helper.make_node("Add", add_inputs, ["y"], name="add")],
        CONV_INPUTS + [("skip", [1, 4, 8, 8])], ["y"], CONV_INITS,
    )
    feeds = {"x": _f32(1, 3, 8, 8), "skip": _f32(1, 4, 8, 8)}
    skip = feeds["skip"].copy()
    sess = _session(data)
    for _ in range(2):  # a second run: nothing kept from the first was overwritten
        got = sess.run(None, feeds)
        _expect_onnxruntime(data, feeds, got)
    assert tracer.shares("relu", 0)  # Relu wrote into the Conv output
    assert tracer.shares("add", 1 if skip_first else 0)  # Add wrote into the Relu output
    assert not tracer.shares("add", 0 if skip_first else 1)  # never into the graph input
    np.testing.assert_array_equal(feeds["skip"], skip)


UNARY = ["Relu", "Sigmoid", "Tanh", "Exp", "Log", "Neg", "Abs", "Sqrt", "Reciprocal", "Erf", "Clip", "HardSwish"]


@pytest.mark.parametrize("op", UNARY)
def test_unary_in_place_is_bit_equal_to_out_of_place(tracer, op):
    # Abs first: Log/Sqrt/Reciprocal see positive values; Abs itself runs in place on the Conv output
    extra, inits = [], list(CONV_INITS)
    if op == "Clip":
        extra, inits = ["lo", "hi"], inits + [("lo", np.array(-0.3, np.float32)), ("hi", np.array(0.7, np.float32))]
    data = _model(
        [CONV, helper.make_node("Abs", ["c"], ["a"], name="abs"),
         helper.make_node(op, ["a", *extra], ["y"], name="op")],
        CONV_INPUTS, ["y"], inits,
    )
    feeds = {"x": _f32(1, 3, 8, 8)}
    on = _session(data).run(None, feeds)[0]
    assert tracer.shares("abs", 0) and tracer.shares("op", 0)
    off = _session(data, enable=False).run(None, feeds)[0]
    assert not tracer.shares("op", 0)
    np.testing.assert_array_equal(on, off)
    _expect_onnxruntime(data, feeds, [on])


def test_erf_in_place_takes_the_one_array_loop(tracer, monkeypatch):
    """In place, the compiled Erf runs its loop over one array: the two-array loop given y = x
    fails LLVM's overlap check and runs scalar (3x slower on a transformer's GELU input)."""
    from compiled_loops import use_compiled

    used = use_compiled(monkeypatch, True, "erf")
    data = _model([CONV, helper.make_node("Abs", ["c"], ["a"], name="abs"), helper.make_node("Erf", ["a"], ["y"], name="op")],
                  CONV_INPUTS, ["y"], list(CONV_INITS))
    feeds = {"x": _f32(1, 3, 8, 8)}
    got = _session(data).run(None, feeds)
    assert tracer.shares("op", 0)
    assert used == [(True, 1)]  # (in_place, parts: a small array on one thread)
    _expect_onnxruntime(data, feeds, got)


@pytest.mark.parametrize("op", sorted(inplace.BINARY_UFUNCS))
@pytest.mark.parametrize("other_shape", [[1, 4, 8, 8], [4, 1, 1], []])
def test_binary_in_place_is_bit_equal_to_out_of_place(tracer, op, other_shape):
    data = _model(
        [CONV, helper.make_node("Abs", ["c"], ["a"], name="abs"), helper.make_node(op, ["a", "o"], ["y"], name="op")],
        CONV_INPUTS + [("o", other_shape)], ["y"], CONV_INITS,
    )
    feeds = {"x": _f32(1, 3, 8, 8), "o": _f32(*other_shape, positive=True)}
    on = _session(data).run(None, feeds)[0]
    assert tracer.shares("op", 0) and not tracer.shares("op", 1)
    off = _session(data, enable=False).run(None, feeds)[0]
    np.testing.assert_array_equal(on, off)
    _expect_onnxruntime(data, feeds, [on])


def test_matmul_output_reshaped_from_one_gemm_is_written_in_place(tracer):
    # MatMul of (2, 5, 3) by (3, 4) is one (10, 3) @ (3, 4) GEMM: reshaped back from numpy's
    # (a whole view), made at its shape by oneDNN's sgemm; in place either way
    data = _model(
        [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"), helper.make_node("Add", ["m", "bias"], ["y"], name="add")],
        [("x", [2, 5, 3])], ["y"], [("w", _f32(3, 4)), ("bias", _f32(4))],
    )
    feeds = {"x": _f32(2, 5, 3)}
    got = _session(data).run(None, feeds)
    _expect_onnxruntime(data, feeds, got)
    assert tracer.shares("add", 0)


# --------------------------------------------------------------------------------------------
# never in place where it is not
# --------------------------------------------------------------------------------------------


def test_value_with_two_consumers_is_not_overwritten(tracer):
    data = _model(
        [CONV, helper.make_node("Relu", ["c"], ["r"], name="relu"), helper.make_node("Add", ["r", "c"], ["y"], name="add")],
        CONV_INPUTS, ["y"], CONV_INITS,
    )
    feeds = {"x": _f32(1, 3, 8, 8)}
    got = _session(data).run(None, feeds)
    _expect_onnxruntime(data, feeds, got)
    assert not tracer.shares("relu", 0)
    assert tracer.shares("add", 0) and not tracer.shares("add", 1)


def test_graph_input_is_not_overwritten(tracer):
    data = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [("x", [2, 3])], ["y"])
    feeds = {"x": _f32(2, 3)}
    kept = feeds["x"].copy()
    got = _session(data).run(None, feeds)
    np.testing.assert_array_equal(feeds["x"], kept)
    assert not tracer.shares("relu", 0)
    np.testing.assert_array_equal(got[0], np.maximum(kept, 0))


def test_graph_output_is_not_overwritten(tracer):
    data = _model([CONV, helper.make_node("Relu", ["c"], ["r"], name="relu")], CONV_INPUTS, ["c", "r"], CONV_INITS)
    feeds = {"x": _f32(1, 3, 8, 8)}
    got = _session(data).run(None, feeds)
    _expect_onnxruntime(data, feeds, got)
    assert (got[0] < 0).any() and not tracer.shares("relu", 0)


def test_initializer_and_constant_are_not_overwritten(tracer):
    k = _f32(1, 4, 8, 8)
    data = _model(
        [CONV,
         helper.make_node("Constant", [], ["k2"], name="const", value=numpy_helper.from_array(_f32(1, 4, 8, 8))),
         helper.make_node("Add", ["k", "c"], ["s"], name="add_init"),  # in place into c, not into k
         helper.make_node("Mul", ["k2", "k"], ["p"], name="mul_consts"),  # nothing to write into
         helper.make_node("Sub", ["s", "p"], ["y"], name="sub")],
        CONV_INPUTS, ["y"], CONV_INITS + [("k", k)],
    )
    feeds = {"x": _f32(1, 3, 8, 8)}
    sess = _session(data)
    for _ in range(2):  # an overwritten initializer or Constant would change the second run
        _expect_onnxruntime(data, feeds, sess.run(None, feeds))
    assert tracer.shares("add_init", 1) and not tracer.shares("add_init", 0)
    assert not tracer.shares("mul_consts", 0) and not tracer.shares("mul_consts", 1)


def test_reshape_view_is_not_overwritten(tracer):
    # r is a view of c (Reshape) and c is read again by the Add: Relu writing into r would
    # change c under the Add
    assert ("", "Reshape") not in inplace.FRESH_OUTPUT_OPS
    data = _model(
        [CONV,
         helper.make_node("Reshape", ["c", "flat"], ["v"], name="reshape"),
         helper.make_node("Relu", ["v"], ["r"], name="relu"),
         helper.make_node("Reshape", ["r", "shape"], ["r4"], name="back"),
         helper.make_node("Add", ["r4", "c"], ["y"], name="add")],
        CONV_INPUTS, ["y"],
        CONV_INITS + [("flat", np.array([1, -1], np.int64)), ("shape", np.array([1, 4, 8, 8], np.int64))],
    )
    feeds = {"x": _f32(1, 3, 8, 8)}
    got = _session(data).run(None, feeds)
    _expect_onnxruntime(data, feeds, got)
    assert not tracer.shares("relu", 0)


def test_output_broadcast_beyond_an_input_gets_a_fresh_buffer(tracer):
    # g (1, 4, 1, 1) is free to overwrite, but the sum has the shape of the graph input
    data = _model(
        [CONV, helper.make_node("GlobalAveragePool", ["c"], ["g"], name="gap"),
         helper.make_node("Add", ["g", "z"], ["y"], name="add")],
        CONV_INPUTS + [("z", [1, 4, 8, 8])], ["y"], CONV_INITS,
    )
    feeds = {"x": _f32(1, 3, 8, 8), "z": _f32(1, 4, 8, 8)}
    got = _session(data).run(None, feeds)
    _expect_onnxruntime(data, feeds, got)
    assert not tracer.shares("add", 0) and not tracer.shares("add", 1)


def test_value_read_by_a_subgraph_is_not_overwritten(tracer):
    branch = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["o"])], "branch", [], [helper.make_tensor_value_info("o", F, [])]
    )
    data = _model(
        [CONV, helper.make_node("If", ["cond"], ["i"], name="if", then_branch=branch, else_branch=branch),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("Add", ["r", "i"], ["y"], name="add")],
        CONV_INPUTS, ["y"], CONV_INITS,
    )
    model = onnx.load_from_string(data)
    model.graph.input.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    data = model.SerializeToString()
    feeds = {"x": _f32(1, 3, 8, 8), "cond": np.array(True)}
    got = _session(data).run(None, feeds)
    _expect_onnxruntime(data, feeds, got)
    assert not tracer.shares("relu", 0)


def test_option_off_keeps_every_output_fresh(tracer):
    data = _model(
        [CONV, helper.make_node("Relu", ["c"], ["r"], name="relu"), helper.make_node("Add", ["r", "skip"], ["y"], name="add")],
        CONV_INPUTS + [("skip", [1, 4, 8, 8])], ["y"], CONV_INITS,
    )
    feeds = {"x": _f32(1, 3, 8, 8), "skip": _f32(1, 4, 8, 8)}
    sess = _session(data, enable=False)
    _expect_onnxruntime(data, feeds, sess.run(None, feeds))
    assert tracer.in_place_count() == 0
    assert sess.get_provider_options()[CPU]["enable_inplace"] == "False"


def test_bad_option_value_is_named():
    data = _model([helper.make_node("Relu", ["x"], ["y"])], [("x", [2])], ["y"])
    with pytest.raises(ort.InvalidArgument, match="enable_inplace"):
        ort.InferenceSession(data, providers=[(CPU, {"enable_inplace": "sometimes"})])


# --------------------------------------------------------------------------------------------
# a producer run by another provider
# --------------------------------------------------------------------------------------------

MEMO = "MemoHostExecutionProvider"


class MemoProvider:
    """A host-memory provider (test double) whose Relu keeps its last result and returns that
    very array again for an equal input: a legitimate cache as long as nobody writes into what
    it returns. An array that owns its memory, so only the placement check protects it."""

    def __init__(self):
        self.last: tuple[np.ndarray, np.ndarray] | None = None

    @ort.hookimpl
    def ort_register_providers(self):
        return [ort.ProviderSpec(MEMO, "0", "tests", "kernel")]

    @ort.hookimpl
    def ort_ep_devices(self, provider):
        return ort.EpDevices((ort.EpDevice(MEMO, "tests", "CPU", "memo"),)) if provider == MEMO else None

    @ort.hookimpl
    def ort_get_capability(self, ep, graph, candidates):
        if ep.name != MEMO:
            return None
        cap = ort.Capability()
        for i in sorted(candidates):
            if graph.nodes[i].op_type == "Relu":
                cap.claims.append(ort.Claim((i,)))
            else:
                cap.declined[i] = "only Relu here"
        return cap

    @ort.hookimpl
    def ort_create_kernel(self, ep, request):
        if ep.name != MEMO:
            return None

        def relu(x):
            if self.last is not None and np.array_equal(self.last[0], x):
                return self.last[1]
            y = np.maximum(x, 0)
            self.last = (x.copy(), y)
            return y

        return ort.Kernel(run=relu, single_output=True)


def test_producer_on_another_provider_is_not_overwritten(tracer):
    plugin = MemoProvider()
    assert ort.register(plugin, "memo-provider")
    try:
        data = _model(
            [CONV, helper.make_node("Relu", ["c"], ["r"], name="relu"), helper.make_node("Add", ["r", "skip"], ["y"], name="add")],
            CONV_INPUTS + [("skip", [1, 4, 8, 8])], ["y"], CONV_INITS,
        )
        sess = _session(data, providers=[MEMO])
        assert sess.get_placement().counts()[MEMO] == 1
        feeds = {"x": _f32(1, 3, 8, 8), "skip": _f32(1, 4, 8, 8)}
        for _ in range(2):  # the second run is served from the memo
            _expect_onnxruntime(data, feeds, sess.run(None, feeds))
        assert not tracer.shares("add", 0)
    finally:
        ort.unregister(plugin)


# --------------------------------------------------------------------------------------------
# the allow-list: every listed op's kernel returns an array nobody else holds
# --------------------------------------------------------------------------------------------

# op -> (inputs as (name, array) pairs, attributes, opset); the node's output is "y"
def _producer_cases():
    x4, x3, x2 = _f32(1, 2, 6, 6), _f32(2, 3, 4), _f32(2, 3)
    pos = _f32(2, 3, positive=True)
    cases = {
        ("", "Conv"): ([("x", x4), ("w", _f32(3, 2, 3, 3)), ("b", _f32(3))], {"pads": [1, 1, 1, 1]}),
        ("", "ConvTranspose"): ([("x", x4), ("w", _f32(2, 3, 3, 3))], {}),
        ("", "Gemm"): ([("a", _f32(4, 3)), ("b", _f32(5, 3)), ("c", _f32(5))], {"transB": 1}),
        ("", "MatMul"): ([("a", x3), ("b", _f32(4, 5))], {}),
        ("", "Softmax"): ([("x", x3)], {}),
        ("", "LogSoftmax"): ([("x", x3)], {}),
        ("", "BatchNormalization"): ([("x", x4), ("s", _f32(2)), ("b", _f32(2)), ("m", _f32(2)), ("v", _f32(2, positive=True))], {}),
        ("", "LayerNormalization"): ([("x", x3), ("s", _f32(4)), ("b", _f32(4))], {}),
        ("", "MaxPool"): ([("x", x4)], {"kernel_shape": [1, 1]}),
        ("", "AveragePool"): ([("x", x4)], {"kernel_shape": [1, 1]}),
        ("", "GlobalAveragePool"): ([("x", x4)], {}),
        ("", "GlobalMaxPool"): ([("x", x4)], {}),
        ("", "Clip"): ([("x", x2), ("lo", np.array(-0.5, np.float32))], {}),
        ("", "HardSigmoid"): ([("x", x2)], {}),
        ("", "HardSwish"): ([("x", x2)], {}),
        ("", "LeakyRelu"): ([("x", x2)], {}),
        (MS, "FusedConv"): ([("x", x4), ("w", _f32(3, 2, 3, 3))], {"activation": "Relu"}),
        (MS, "FusedGemm"): ([("a", _f32(4, 3)), ("b", _f32(3, 5))], {"activation": "Relu"}),
        (MS, "FusedMatMul"): ([("a", x3), ("b", _f32(4, 5))], {"alpha": 2.0}),
        (MS, "Gelu"): ([("x", x2)], {}),
        (MS, "BiasGelu"): ([("x", x2), ("b", _f32(3))], {}),
        (ort.CORE_DOMAIN, "HardSwish"): ([("x", x2)], {}),
        (ort.CORE_DOMAIN, "LayerNormalization"): ([("x", x3), ("s", _f32(4)), ("b", _f32(4))], {}),
    }
    for op in inplace.BINARY_UFUNCS:
        cases[("", op)] = ([("a", pos), ("b", pos.copy())], {})
    for op in ("Relu", "Sigmoid", "Tanh", "Exp", "Log", "Neg", "Abs", "Sqrt", "Reciprocal", "Erf"):
        cases[("", op)] = ([("x", pos)], {})
    return cases


PRODUCER_CASES = _producer_cases()


def test_every_listed_producer_has_a_case():
    assert set(PRODUCER_CASES) == set(inplace.FRESH_OUTPUT_OPS)


@pytest.mark.parametrize("key", sorted(PRODUCER_CASES), ids=lambda k: f"{k[0]}::{k[1]}" if k[0] else k[1])
def test_listed_producer_returns_a_fresh_array(tracer, key):
    domain, op = key
    inputs, attrs = PRODUCER_CASES[key]
    node = helper.make_node(op, [n for n, _ in inputs], ["y"], name="p", domain=domain, **attrs)
    data = _model([node], [(n, list(a.shape)) for n, a in inputs], ["y"], ms=domain == MS, domain=domain)
    feeds = dict(inputs)
    sess = _session(data)
    sess.run(None, feeds)
    args, first = tracer.calls["p"]
    sess.run(None, feeds)
    _, second = tracer.calls["p"]
    assert isinstance(first, np.ndarray)
    for a in args:
        assert not np.shares_memory(first, a), f"{op} returned a view of an input"
    assert not np.shares_memory(first, second), f"{op} returned the same buffer twice (a cache)"
    assert inplace.private(first), f"{op} returned an array that does not own its buffer"


def test_private_is_false_for_partial_and_read_only_views():
    a = np.zeros((4, 6), np.float32)
    assert inplace.private(a) and inplace.private(a.reshape(2, 12))
    assert not inplace.private(a[1:]) and not inplace.private(a.T) and not inplace.private(a[:, ::2])
    frozen = a.copy()
    frozen.flags.writeable = False
    assert not inplace.private(frozen)
    assert not inplace.private(np.float32(1.0))


# --------------------------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
@pytest.mark.parametrize("level", [ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL])
def test_generated_models_in_place_match_onnxruntime(tracer, name, level):
    model = models.MODELS[name]()
    data = model.SerializeToString()
    feeds = models.random_inputs(model, batch=2, seed=3)
    sess = _session(data, level=level)
    for _ in range(2):
        got = sess.run(None, feeds)
        _expect_onnxruntime(data, feeds, got)
    if name != "mlp" or level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL:  # (fused away at "all")
        assert tracer.in_place_count() > 0
    tracer.calls.clear()
    off = _session(data, enable=False, level=level).run(None, feeds)
    for g, o in zip(got, off):
        np.testing.assert_array_equal(g, o)


def _real_case(name):
    path = fetch_or_skip(name)
    rng = np.random.default_rng(0)
    if name == "silero-vad":
        feeds = {"input": rng.standard_normal((1, 512)).astype(np.float32) * 0.1,
                 "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(16000, np.int64)}
    else:
        size = {"ocr-det": (320, 320), "ocr-rec": (48, 320), "ocr-cls": (48, 192)}[name]
        feeds = {"x": rng.random((1, 3, *size), dtype=np.float32)}
    return path.read_bytes(), feeds


@pytest.mark.parametrize("name", ["ocr-det", "ocr-rec", "ocr-cls", "silero-vad"])
def test_real_models_in_place_match_onnxruntime(tracer, name):
    data, feeds = _real_case(name)
    sess = _session(data, level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    for _ in range(2):
        _expect_onnxruntime(data, feeds, sess.run(None, feeds), rtol=1e-3, atol=1e-4)
    if name != "silero-vad":  # (its elementwise nodes read values that others read too)
        assert tracer.in_place_count() > 0


def test_concurrent_runs_do_not_share_buffers():
    # each run's intermediates are its own arrays: runs from several threads at once give what
    # they give one at a time
    from concurrent.futures import ThreadPoolExecutor

    model = models.cnn(image=32)
    sess = _session(model.SerializeToString(), level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    feeds = [models.random_inputs(model, batch=2, seed=s) for s in range(8)]
    alone = [sess.run(None, f)[0] for f in feeds]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda f: sess.run(None, f)[0], feeds * 3))
    for k, got in enumerate(together):
        np.testing.assert_array_equal(got, alone[k % len(feeds)])


def test_memory_stats_count_a_shared_buffer_once():
    """get_memory_stats: an output written into its input's buffer, and a view (Reshape), add
    no bytes. x (1 MiB, live to the end) -> Relu -> Sigmoid -> Neg -> Add(x) -> Reshape: with
    in-place outputs x and Relu's buffer are all there is (2 MiB; counting each in-place output
    or the view as new memory gave 3); without, each op's output is a new buffer next to its
    input's (3 MiB)."""
    n = 1 << 18  # float32: 1 MiB
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sigmoid", ["r"], ["s"]),
             helper.make_node("Neg", ["s"], ["u"]), helper.make_node("Add", ["u", "x"], ["a"]),
             helper.make_node("Reshape", ["a", "shape"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [n])],
                              [helper.make_tensor_value_info("y", F, [n])],
                              [numpy_helper.from_array(np.array([n], dtype=np.int64), "shape")])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    x = _f32(n)
    peaks = {}
    for enable in (True, False):
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(data, options, providers=[(CPU, {"enable_inplace": "1" if enable else "0"})])
        sess.run(None, {"x": x})
        peaks[enable] = sess.get_memory_stats()["Cpu"]["peak_bytes"]
    assert peaks == {True: 2 * x.nbytes, False: 3 * x.nbytes}


@pytest.mark.parametrize("size", [inplace.INPLACE_MIN_ELEMENTS - 1, inplace.INPLACE_MIN_ELEMENTS])
def test_tensors_below_the_size_floor_are_computed_out_of_place(tracer, monkeypatch, size):
    """Below ``INPLACE_MIN_ELEMENTS`` the checks cost more than the allocation they save: the
    Relu and the Add make new arrays; at the floor they write into their inputs. Same values."""
    monkeypatch.setattr(inplace, "INPLACE_MIN_ELEMENTS", 1024)
    nodes = [helper.make_node("Neg", ["x"], ["n"], name="neg"),
             helper.make_node("Relu", ["n"], ["r"], name="relu"),
             helper.make_node("Add", ["r", "x"], ["y"], name="add")]
    data = _model(nodes, [("x", [size])], ["y"])
    x = _f32(size)
    got = ort.InferenceSession(data, providers=[CPU]).run(None, {"x": x})[0]
    in_place = size >= 1024
    assert tracer.shares("relu", 0) == in_place and tracer.shares("add", 0) == in_place
    np.testing.assert_array_equal(got, np.maximum(-x, 0) + x)
