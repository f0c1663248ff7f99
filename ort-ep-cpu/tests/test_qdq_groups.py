"""QDQ-quantized models (``onnxruntime.quantization.quantize_static``, QDQ format) in oneDNN
groups (``kernels/onednn_group.py``): a DequantizeLinear of constants is a constant of the group,
a QuantizeLinear -> DequantizeLinear pair is computed as one (eltwise post-ops after a
convolution or pool, else a step), a BatchNormalization with constant parameters as
per-channel binary post-ops (or a step).

Compared with onnxruntime, whose CPU provider runs the same model as integer kernels
(QLinearConv, ...) at its default level and as written at ORT_DISABLE_ALL: outputs are
DequantizeLinear outputs, on a grid of the output's scale; a value that lands within float
rounding of a tie rounds either way, in any layer, so an element may differ by a step. Measured
on these models: at most 1 step, for under 2% of the elements (``STEPS``, ``OFF_FRACTION``).
"""

from __future__ import annotations

import gc
import logging
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import ort_core as ort
from ort_core.testing import exact_reference
from ort_ep_cpu.kernels import _onednn, onednn_group

pytest.importorskip("onnxruntime.quantization")
pytestmark = pytest.mark.skipif(not _onednn.available(), reason=f"oneDNN not used: {_onednn.info().get('reason')}")

#: the largest difference from onnxruntime, in steps of the output's scale, and the fraction
#: of elements allowed to differ at all
STEPS, OFF_FRACTION = 1.0, 0.02
LEVELS = ("ORT_DISABLE_ALL", "ORT_ENABLE_ALL")
MEASURED: list[tuple[float, float]] = []  # (max steps, fraction off) of each comparison


class Net:
    """A float model written node by node, with seeded weights, quantized by ``quantized``."""

    def __init__(self, channels: int, image: int, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.x_shape = ["batch", channels, image, image]
        self.nodes, self.inits = [], []
        self.count = 0

    def _name(self, stem):
        self.count += 1
        return f"{stem}{self.count}"

    def const(self, array):
        name = self._name("c")
        self.inits.append(onnx.numpy_helper.from_array(np.asarray(array, np.float32), name))
        return name

    def op(self, op_type, inputs, **attrs):
        out = self._name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=out, **attrs))
        return out

    def conv(self, x, c_in, c_out, k=3, group=1, bias=True, **attrs):
        attrs.setdefault("pads", [k // 2] * 4)
        w = self.const(self.rng.standard_normal((c_out, c_in // group, k, k)) * (1.5 / np.sqrt(c_in // group * k * k)))
        inputs = [x, w] + ([self.const(self.rng.standard_normal(c_out) * 0.1)] if bias else [])
        return self.op("Conv", inputs, kernel_shape=[k, k], group=group, **attrs)

    def batch_norm(self, x, c):
        params = [self.rng.uniform(0.5, 1.5, c), self.rng.standard_normal(c) * 0.1,
                  self.rng.standard_normal(c) * 0.1, self.rng.uniform(0.5, 1.5, c)]
        return self.op("BatchNormalization", [x] + [self.const(p) for p in params], epsilon=1e-5)

    def model(self, output) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, self.x_shape)],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)], self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def quantized(model: onnx.ModelProto, activation: str = "uint8", per_channel: bool = False,
              x_shape=(1, 3, 16, 16)) -> bytes:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter({"x": np.random.default_rng(s).standard_normal(x_shape).astype(np.float32)}
                              for s in range(4))

        def get_next(self):
            return next(self.feeds, None)

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # quantize_static's advice on pre-processing
    try:
        with tempfile.TemporaryDirectory() as tmp:
            src, dst = Path(tmp) / "float.onnx", Path(tmp) / "qdq.onnx"
            onnx.save(model, src)
            quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                            activation_type=QuantType.QUInt8 if activation == "uint8" else QuantType.QInt8,
                            weight_type=QuantType.QInt8)
            return dst.read_bytes()
    finally:
        root.setLevel(level)


def _step(data: bytes) -> float:
    """The scale of the DequantizeLinear that makes the model's output."""
    model = onnx.load_from_string(data)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    node = next(n for n in model.graph.node if n.output[0] == model.graph.output[0].name)
    assert node.op_type == "DequantizeLinear"
    return float(inits[node.input[1]])


def _session(data: bytes, level: str = "ORT_DISABLE_ALL") -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def _check(data: bytes, batch: int, image: int = 16, channels: int = 3, levels=LEVELS, seed: int = 1) -> ort.InferenceSession:
    """Runs ``data`` at each level against onnxruntime's integer kernels (its default level)
    and its QDQ graph as written (ORT_DISABLE_ALL); returns the last session."""
    x = np.random.default_rng(seed).standard_normal((batch, channels, image, image)).astype(np.float32)
    step = _step(data)
    wants = []
    for level in ("ORT_DISABLE_ALL", "ORT_ENABLE_ALL"):
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = getattr(onnxruntime.GraphOptimizationLevel, level)
        wants.append(exact_reference.session(data, options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0])
    session = None
    for level in levels:
        session = _session(data, level)
        got = session.run(None, {"x": x})[0]
        for want in wants:
            assert got.shape == want.shape and got.dtype == want.dtype
            off = np.abs(got.astype(np.float64) - want) / step
            MEASURED.append((off.max(), (off > 0.5).mean()))
            assert off.max() <= STEPS + 1e-3, (level, off.max())
            assert (off > 0.5).mean() <= OFF_FRACTION, (level, (off > 0.5).mean())
    return session


def _groups(session: ort.InferenceSession) -> list[list[str]]:
    """The oneDNN groups' op types (not the QuantizeLinear pairs outside them, each a group of
    its own: ``test_qdq_pairs.py``)."""
    result: dict[int, list[str]] = {}
    for p in session.get_placement().nodes:
        if p.group is not None and p.graph == "":
            result.setdefault(p.group, []).append(p.op_type)
    return [ops for ops in result.values() if ops != ["QuantizeLinear", "DequantizeLinear"]]


def _programs() -> list[onednn_group._Program]:
    # type(), not isinstance(): isinstance of a weakref proxy whose object died raises
    return [o for o in gc.get_objects() if type(o) is onednn_group._Program]


def _cnn(bias: bool = True, strides=(1, 1), group: int = 1, seed: int = 0) -> onnx.ModelProto:
    """conv-BN-relu, a max pool, a residual block whose second conv is grouped, a strided 3x3
    conv beside a 1x1 shortcut, a global average pool."""
    n = Net(3, 16, seed)
    x = n.op("Relu", [n.batch_norm(n.conv("x", 3, 16, bias=bias, strides=list(strides)), 16)])
    x = n.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    a = n.op("Relu", [n.conv(x, 16, 16, bias=bias)])
    b = n.batch_norm(n.conv(a, 16, 16, group=group, bias=bias), 16)
    x = n.op("Relu", [n.op("Add", [b, x])])
    y = n.conv(x, 16, 32, strides=[2, 2], bias=bias)
    shortcut = n.conv(x, 16, 32, k=1, strides=[2, 2], bias=bias)
    x = n.op("Relu", [n.op("Add", [y, shortcut])])
    return n.model(n.op("GlobalAveragePool", [x]))


@pytest.mark.parametrize("activation", ["uint8", "int8"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("batch", [1, 8])
def test_qdq_cnn_matches_onnxruntime_in_one_group(activation, per_channel, batch):
    data = quantized(_cnn(), activation, per_channel)
    session = _check(data, batch)
    groups = _groups(session)
    assert len(groups) == 1
    group = groups[0]
    # every convolution, pool, BatchNormalization, Add and the Q/DQ pairs between them; the
    # DequantizeLinears of the weights and biases come along as constants
    assert group.count("Conv") == 5 and "MaxPool" in group and "GlobalAveragePool" in group
    assert group.count("BatchNormalization") == 2 and group.count("Add") == 2
    assert group.count("QuantizeLinear") >= 8


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("strides,group", [((2, 2), 1), ((1, 1), 2), ((1, 1), 16)],
                         ids=["strided", "grouped", "depthwise"])
def test_geometries(bias, strides, group):
    data = quantized(_cnn(bias=bias, strides=strides, group=group, seed=3), "uint8", per_channel=True)
    _check(data, 2)


def test_quantize_pairs_become_post_ops():
    """Each convolution applies the Q/DQ pair, the BatchNormalization, the residual Add and
    the pair after it as post-ops: one step per convolution and pool, plus the reorders."""
    gc.collect()
    before = {id(p) for p in _programs()}
    session = _check(quantized(_cnn(), "uint8", True), 1, levels=("ORT_DISABLE_ALL",))
    assert session is not None
    (program,) = [p for p in _programs() if id(p) not in before]
    assert program.primitives == 7
    labels = [label.split(" node")[0] for label in program.labels]
    conversions = ("the reorder", "the quantization", "the dequantization")  # (8-bit codes: below)
    assert [lab for lab in labels if not lab.startswith(conversions)] == [
        "Conv", "MaxPool", "Conv", "Conv", "Conv", "Conv", "GlobalAveragePool"]


@pytest.mark.parametrize("activation", ["uint8", "int8"])
def test_convolutions_run_on_codes(monkeypatch, activation):
    """Where the CPU has 8-bit dot products (VNNI, AMX), each convolution runs on the codes of
    its input as onnxruntime's QLinearConv does: oneDNN's 8-bit convolution with the input's
    and weights' scales, its output quantized by the pair after it (the residual Add's
    addend read as codes too), and the MaxPool between pairs of the same codes on the codes.
    The results are onnxruntime's integer kernels' within the file's step bounds."""
    quantizations, pool_types = [], []
    real_conv, real_pool = _onednn.Convolution.__init__, _onednn.Pooling.__init__

    def conv_spy(self, *args, quantization=None, **kwargs):
        real_conv(self, *args, quantization=quantization, **kwargs)
        quantizations.append(quantization)  # (after: a declined one raises above)

    def pool_spy(self, *args, dtype=np.float32, **kwargs):
        real_pool(self, *args, dtype=dtype, **kwargs)
        pool_types.append(np.dtype(dtype))

    monkeypatch.setattr(_onednn.Convolution, "__init__", conv_spy)
    monkeypatch.setattr(_onednn.Pooling, "__init__", pool_spy)
    gc.collect()
    before = {id(p) for p in _programs()}
    _check(quantized(_cnn(), activation, True), 2, levels=("ORT_DISABLE_ALL",))
    (program,) = [p for p in _programs() if id(p) not in before]
    if not program.integer:
        pytest.skip("oneDNN's 8-bit convolutions on this CPU have no dot-product instructions (they would saturate)")
    assert len(quantizations) == 5 and None not in quantizations
    # every one is followed by a pair: its output is quantized by the primitive where a
    # convolution, pool or Add reads it (the residual Adds' addends are codes of the same type);
    # the stem's, read by its BatchNormalization, is made in float32
    assert sum(q.y_scale is not None for q in quantizations) == 4
    codes = np.dtype(np.uint8 if activation == "uint8" else np.int8)
    assert all(q.y_dtype == codes for q in quantizations if q.y_scale is not None)
    assert pool_types == [codes, np.dtype(np.float32)]  # the MaxPool; the GlobalAveragePool
    # each convolution is followed by its pair at once: onnxruntime's requantization, the
    # product unscaled (scales 1) and x_scale * w_scale / y_scale a per-channel post-op
    assert all(q.x_scale == 1.0 and np.all(q.w_scales == 1.0) for q in quantizations)


def test_pairs_and_batch_norm_as_steps_where_not_post_ops(monkeypatch):
    """Without post-ops (a CPU whose kernels take none), the pairs and BatchNormalizations run
    as steps on the arrays in the group's layout."""
    monkeypatch.setattr(onednn_group._Program, "_post_ops",
                        lambda self, node, y_shape, pool=False: ([], [], node.outputs[0], None))
    gc.collect()
    before = {id(p) for p in _programs()}
    _check(quantized(_cnn(), "int8", False), 2, levels=("ORT_DISABLE_ALL",))
    (program,) = [p for p in _programs() if id(p) not in before]
    labels = [label.split(" node")[0] for label in program.labels]
    assert "QuantizeLinear" in labels and "BatchNormalization" in labels


@pytest.mark.parametrize("layout", ["nChw16c", "nChw8c"])
def test_blocked_layouts(monkeypatch, layout):
    lib = _onednn.library()
    monkeypatch.setattr(lib, "_layout", layout)
    _check(quantized(_cnn(), "uint8", True), 2, levels=("ORT_DISABLE_ALL",))


def test_the_bench_qdq_model_matches_within_a_step():
    """The bench's qdq-cnn (the generated cnn, per-tensor weights; its BatchNormalizations sit
    between Q/DQ pairs, so no level folds them)."""
    from ort_core.testing import models

    proto = models.cnn(image=32, width=16, blocks=2)
    data = quantized(proto, "uint8", False, x_shape=(1, 3, 32, 32))
    session = _check(data, 4, image=32)
    assert len(_groups(session)) == 1


def test_a_quantize_read_twice_stays_out_of_the_pair():
    """A QuantizeLinear whose output is also a graph output keeps its own kernel: the group
    does not make its integer output."""
    proto = _cnn()
    data = quantized(proto, "uint8", False)
    model = onnx.load_from_string(data)
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0].startswith("relu"))
    model.graph.output.append(helper.make_tensor_value_info(q.output[0], TensorProto.UINT8, None))
    data = model.SerializeToString()
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    want = exact_reference.session(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = _session(data).run(None, {"x": x})
    assert got[1].dtype == np.uint8
    assert np.abs(got[1].astype(int) - want[1].astype(int)).max() <= 1
    placement = {p.name: p for p in _session(data).get_placement().nodes}
    assert placement[q.name].group is None


def test_a_lone_qdq_convolution_is_a_group():
    """One convolution with its Q/DQ pairs groups on its own (a float one needs two
    primitives): its weights are constants there."""
    n = Net(3, 16)
    data = quantized(n.model(n.conv("x", 3, 8, bias=True)), "uint8", True)
    session = _check(data, 2)
    (group,) = _groups(session)
    assert group.count("Conv") == 1 and "QuantizeLinear" in group


def test_float_models_group_as_before(monkeypatch):
    """The float model quantize_static started from: at ORT_DISABLE_ALL its BatchNormalizations
    are group members (as any BatchNormalization with constant parameters is), its values are
    onnxruntime's, and its pools take no post-ops (the QDQ members change nothing for it)."""
    pool_post_ops = []
    real = _onednn.Pooling.__init__

    def spy(self, *args, post_ops=(), **kwargs):
        pool_post_ops.append(list(post_ops))
        real(self, *args, post_ops=post_ops, **kwargs)

    monkeypatch.setattr(_onednn.Pooling, "__init__", spy)
    proto = _cnn()
    data = proto.SerializeToString()
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    want = exact_reference.session(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    session = _session(data)
    np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-4)
    placement = session.get_placement().nodes
    assert all(p.group is not None for p in placement if p.op_type == "BatchNormalization")
    assert pool_post_ops == [[], []]  # the MaxPool and the GlobalAveragePool


def _paddle_activations() -> onnx.ModelProto:
    """Paddle's hard-swish written out, x * Clip(x + 3, 0, 6) / 6, and a Gelu written with Erf,
    x * 0.5 * (1 + erf(x / sqrt 2)), between convolutions (PP-OCR's backbones)."""
    n = Net(3, 16, seed=4)
    x = n.conv("x", 3, 16)
    clipped = n.op("Clip", [n.op("Add", [x, n.const(3.0)]), n.const(0.0), n.const(6.0)])
    x = n.op("Mul", [x, n.op("Div", [clipped, n.const(6.0)])])
    x = n.conv(x, 16, 16, group=16)
    erf = n.op("Erf", [n.op("Div", [x, n.const(np.sqrt(2.0))])])
    x = n.op("Mul", [n.op("Mul", [x, n.const(0.5)]), n.op("Add", [erf, n.const(1.0)])])
    x = n.op("Sub", [n.conv(x, 16, 8), n.const(0.25)])
    return n.model(n.conv(x, 8, 8))


def _paddle_lcnet_hard_swish(convs: int = 3, divide_first: bool = False) -> onnx.ModelProto:
    """PP-LCNet's hard swish as Paddle exports it, x * Clip(x + 3, 0, 6) / 6 (the Mul before
    the Div), after each of ``convs`` convolutions (every other one depthwise), the last one
    read by a GlobalAveragePool (which takes float32, not codes: its pair is in the chain).
    ``divide_first``: x * (Clip(x + 3, 0, 6) / 6), the other spelling."""
    n = Net(3, 16, seed=6)
    x, c_in = "x", 3
    for k in range(convs):
        c_out = 8 if k % 2 == 0 else c_in
        x = n.conv(x, c_in, c_out, group=1 if k % 2 == 0 else c_in)
        clipped = n.op("Clip", [n.op("Add", [x, n.const(3.0)]), n.const(0.0), n.const(6.0)])
        if divide_first:
            x = n.op("Mul", [x, n.op("Div", [clipped, n.const(6.0)])])
        else:
            x = n.op("Div", [n.op("Mul", [x, clipped]), n.const(6.0)])
        c_in = c_out
    return n.model(n.conv(n.op("GlobalAveragePool", [x]), c_in, 4, k=1))


@pytest.mark.parametrize("divide_first", [False, True], ids=["mul-then-div", "div-then-mul"])
def test_a_qdq_hard_swish_is_one_compiled_step(monkeypatch, divide_first):
    """Its Add, Mul and Div with their Q/DQ pairs (quantize_static drops the Clip) run as one
    compiled pass whose outputs are the steps' own, bit for bit, and onnxruntime's within the
    file's steps."""
    data = quantized(_paddle_lcnet_hard_swish(divide_first=divide_first), "uint8", True)
    x = np.random.default_rng(3).standard_normal((2, 3, 16, 16)).astype(np.float32)
    made = []
    real = onednn_group._HardSwishChain.__init__

    def counted(self, *args, **kwargs):
        made.append(args)
        real(self, *args, **kwargs)
        assert self.divide_first == divide_first

    monkeypatch.setattr(onednn_group._HardSwishChain, "__init__", counted)
    fused = _session(data).run(None, {"x": x})[0]
    assert len(made) == 3
    assert any(args[4] is None for args in made) and any(args[4] is not None for args in made)  # both ends
    monkeypatch.setattr(onednn_group._jit, "qdq_hard_swish", lambda: None)
    assert np.array_equal(_session(data).run(None, {"x": x})[0], fused)
    assert len(made) == 3  # (no loop: no fusion)
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = exact_reference.session(data, options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    off = np.abs(fused.astype(np.float64) - want) / _step(data)
    assert off.max() <= STEPS + 1e-3 and (off > 0.5).mean() <= OFF_FRACTION, off.max()


def test_a_hard_swish_chain_value_read_elsewhere_is_not_fused(monkeypatch):
    """A value between the chain's steps that another node reads (here the Mul's, by a
    second elementwise branch) keeps the steps apart: the fused pass would not make it."""
    n = Net(3, 16, seed=7)
    x = n.conv("x", 3, 8)
    clipped = n.op("Clip", [n.op("Add", [x, n.const(3.0)]), n.const(0.0), n.const(6.0)])
    product = n.op("Mul", [x, clipped])
    y = n.op("Add", [n.op("Div", [product, n.const(6.0)]), n.op("Mul", [product, n.const(0.5)])])
    data = quantized(n.model(n.conv(y, 8, 4)), "uint8", True)
    made = []
    monkeypatch.setattr(onednn_group, "_HardSwishChain", lambda *args: made.append(args))
    x = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32)
    _session(data).run(None, {"x": x})
    assert made == []


@pytest.mark.parametrize("quantize", [False, True], ids=["float", "qdq"])
def test_written_out_hard_swish_and_gelu_stay_in_the_group(quantize):
    """Clip of constant bounds, Div / Sub by a constant and Erf are group members: a written-out
    hard-swish or Gelu (with a QDQ pair after each op, which no fusion undoes) split PP-OCR's
    models into 35-72 groups. The results are onnxruntime's; the QDQ model's those of its graph
    as written (ORT_DISABLE_ALL, within the file's steps): onnxruntime's own default level is 2
    steps from that on a quarter of the outputs here (its fusions of the pairs around Sub and
    Erf), as far as this file's models are from nothing."""
    proto = _paddle_activations()
    if quantize:
        data = quantized(proto, "uint8", True)
        step = _step(data)
        x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
        want = exact_reference.session(data, options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        for level in LEVELS:
            session = _session(data, level)
            off = np.abs(session.run(None, {"x": x})[0].astype(np.float64) - want) / step
            assert off.max() <= STEPS + 1e-3 and (off > 0.5).mean() <= OFF_FRACTION, (level, off.max())
    else:
        data = proto.SerializeToString()
        x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
        want = exact_reference.session(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        session = _session(data)
        np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-5)
    groups = _groups(session)
    assert len(groups) == 1
    # (quantize_static drops the Clip: its pair's range clips)
    assert all(op in groups[0] for op in ("Div", "Erf", "Sub") + (() if quantize else ("Clip",)))


@pytest.mark.parametrize("op,attrs", [("MaxPool", {"kernel_shape": [2, 2]}), ("MaxPool", {"kernel_shape": [1, 1]}),
                                      ("AveragePool", {"kernel_shape": [2, 2]})])
def test_a_pools_quantize_linear_pair_divides_by_the_scale(op, attrs):
    """DequantizeLinear -> pool -> QuantizeLinear -> DequantizeLinear in a oneDNN group, the
    pair as post-ops: x / scale is a division there, as QuantizeLinear's spec and onnxruntime
    compute it. Code 163 at (0.03, 110) dequantizes to 1.5899999, and 1.5899999 / 0.02 is 79.5
    exactly: half to even 80 (1.60). The linear eltwise's x * (1 / 0.02) gave 79.49999 -> 79
    (1.58), at every level. Against onnxruntime as written (ORT_DISABLE_ALL), as onnx.reference
    computes it: at its default level onnxruntime makes the AveragePool a QLinearAveragePool,
    which multiplies and gives 1.58 itself."""
    inits = [onnx.numpy_helper.from_array(np.array(v, t), n) for v, t, n in
             ((0.03, np.float32, "xs"), (110, np.uint8, "xz"), (0.02, np.float32, "ys"), (121, np.uint8, "yz"))]
    nodes = [helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["x"]), helper.make_node(op, ["x"], ["t"], **attrs),
             helper.make_node("QuantizeLinear", ["t", "ys", "yz"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("xq", TensorProto.UINT8, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    xq = np.full((1, 3, 4, 4), 163, np.uint8)  # a tie everywhere (an average of other codes rounds its own way)
    written = onnxruntime.SessionOptions()
    written.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = onnxruntime.InferenceSession(model.SerializeToString(), written,
                                        providers=["CPUExecutionProvider"]).run(None, {"xq": xq})[0]
    np.testing.assert_allclose(want, np.float32(1.6), rtol=1e-6)
    for level in LEVELS:
        options = ort.SessionOptions()
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        assert any(p.group is not None for p in session.get_placement().nodes if p.op_type == op)
        np.testing.assert_array_equal(session.run(None, {"xq": xq})[0], want)
