"""Groups of convolutions and pools kept in oneDNN's layout (``kernels/onednn_group.py``).

Each model is compared with onnxruntime at rtol/atol 1e-4 (float32 sums in another order;
oneDNN's own tanh/logistic post-ops), and each test asserts how the group formed and ran: which
nodes it holds, which members became post-ops, how many reorders a run makes. Skipped, with the
reason, where oneDNN is not installed.
"""

from __future__ import annotations

import gc

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper
from parallel_runs import in_forked_child, runs_agree

import ort_core as ort
from ort_core.devices import host_cpu
from ort_ep_cpu.kernels import _onednn, onednn_group

pytestmark = pytest.mark.skipif(not _onednn.available(), reason=f"oneDNN not used: {_onednn.info().get('reason')}")

TOL = 1e-4


class Net:
    """A small model written node by node; weights are seeded initializers."""

    def __init__(self, x_shape, seed=0):
        self.rng = np.random.default_rng(seed)
        self.x_shape = list(x_shape)
        self.nodes, self.inits, self.outputs = [], [], []
        self.count = 0

    def _name(self, stem):
        self.count += 1
        return f"{stem}{self.count}"

    def const(self, array):
        name = self._name("c")
        self.inits.append(onnx.numpy_helper.from_array(np.asarray(array, np.float32), name))
        return name

    def op(self, op_type, inputs, domain="", **attrs):
        out = self._name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=out, domain=domain, **attrs))
        return out

    def conv(self, x, c_in, c_out, k=3, group=1, activation="", **attrs):
        attrs.setdefault("pads", [k // 2] * 4)
        attrs = {key: value for key, value in attrs.items() if value is not None}
        w = self.const(self.rng.standard_normal((c_out, c_in // group, k, k)) * (1.0 / np.sqrt(c_in * k * k)))
        b = self.const(self.rng.standard_normal(c_out) * 0.1)
        if activation:
            return self.op("FusedConv", [x, w, b], domain="com.microsoft", kernel_shape=[k, k], group=group,
                           activation=activation, **attrs)
        return self.op("Conv", [x, w, b], kernel_shape=[k, k], group=group, **attrs)

    def model(self, *outputs, opset: int = 17) -> bytes:
        graph = helper.make_graph(
            self.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, self.x_shape)],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], self.inits)
        opsets = [helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)]
        return helper.make_model(graph, opset_imports=opsets).SerializeToString()


@pytest.fixture
def reorders(monkeypatch):
    """Counts the Reorder primitives run (the group's boundary crossings)."""
    seen: list[int] = []
    real = _onednn.Reorder.run

    def spy(self, x, y):
        seen.append(1)
        return real(self, x, y)

    monkeypatch.setattr(_onednn.Reorder, "run", spy)
    return seen


def _session(data: bytes, threads: int = 2) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the graph as written
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def _check(data: bytes, x_shape, session: ort.InferenceSession | None = None, seed: int = 1) -> list[np.ndarray]:
    x = np.random.default_rng(seed).standard_normal(x_shape).astype(np.float32)
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = (session or _session(data)).run(None, {"x": x})
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=TOL, atol=TOL)
    return got


def _groups(session: ort.InferenceSession) -> dict[int, list[str]]:
    """Fused group id -> op types of its nodes (main graph)."""
    result: dict[int, list[str]] = {}
    for p in session.get_placement().nodes:
        if p.group is not None and p.graph == "":
            result.setdefault(p.group, []).append(p.op_type)
    return result


def _programs() -> list[onednn_group._Program]:
    # type(), not isinstance(): isinstance of a weakref proxy whose object died raises
    return [o for o in gc.get_objects() if type(o) is onednn_group._Program]


def _resnet_block(n: Net, x, c):
    a = n.conv(x, c, c, activation="Relu")
    b = n.conv(a, c, c)
    return n.op("Relu", [n.op("Add", [b, x])])


def test_a_residual_chain_is_one_group_with_reorders_only_at_its_edges(reorders):
    n = Net((2, 3, 20, 20))
    x = n.conv("x", 3, 32, activation="Relu", strides=[2, 2])
    x = n.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    x = _resnet_block(n, x, 32)
    x = _resnet_block(n, x, 32)
    y = n.op("GlobalAveragePool", [x])
    data = n.model(y)
    session = _session(data)
    assert list(_groups(session).values()) == [
        ["FusedConv", "MaxPool", "FusedConv", "Conv", "Add", "Relu", "FusedConv", "Conv", "Add", "Relu",
         "GlobalAveragePool"]]
    gc.collect()
    before = set(map(id, _programs()))
    _check(data, (2, 3, 20, 20), session)
    assert len(reorders) == 1  # the output back to NCHW; the input goes into the first convolution as it is
    (program,) = [p for p in _programs() if id(p) not in before]
    assert program.primitives == 7
    # each residual Add and the Relu after it ride on the second convolution (sum + eltwise)
    assert len(program.absorbed) == 4
    assert sum(isinstance(step[0], onednn_group._SumInto) for step in program.steps) == 2


@pytest.mark.parametrize("op, attrs", [
    ("Relu", {}), ("LeakyRelu", {"alpha": 0.2}), ("Sigmoid", {}), ("Tanh", {}),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("HardSwish", {}),
])
def test_activations_after_a_convolution_become_post_ops(op, attrs):
    n = Net((1, 8, 9, 11))
    a = n.op(op, [n.conv("x", 8, 20)], **attrs)
    data = n.model(n.op(op, [n.conv(a, 20, 24, k=1, pads=[0, 0, 0, 0])], **attrs))
    gc.collect()
    before = set(map(id, _programs()))
    _check(data, (1, 8, 9, 11))
    (program,) = [p for p in _programs() if id(p) not in before]
    assert len(program.absorbed) == 2


GELU_FORMS = [
    ("com.microsoft", "Gelu", {}), ("", "Gelu", {}), ("", "Gelu", {"approximate": "tanh"}),
    ("com.microsoft", "FastGelu", {}), ("com.microsoft", "QuickGelu", {"alpha": 1.5}),
]


@pytest.mark.parametrize("domain, op, attrs", GELU_FORMS)
def test_gelu_forms_join_the_group(reorders, domain, op, attrs):
    """Between convolutions a Gelu is a post-op (its oneDNN eltwise algorithm); one whose input
    has other readers runs its own kernel on the array in the group's layout. Either way the
    chain stays one group (PP-OCRv6's detector was split in 14 by its Gelus)."""
    n = Net((1, 8, 9, 11))
    a = n.op(op, [n.conv("x", 8, 20)], domain=domain, **attrs)  # a post-op
    b = n.conv(a, 20, 24, k=1, pads=[0, 0, 0, 0])
    c = n.op(op, [b], domain=domain, **attrs)  # b has two readers: its own step
    d = n.conv(n.op("Add", [c, n.op("Relu", [b])]), 24, 16)
    data = n.model(d, opset=20)
    session = _session(data)
    assert len(_groups(session)) == 1
    gc.collect()
    before = set(map(id, _programs()))
    _check(data, (1, 8, 9, 11), session)
    assert len(reorders) == 1
    (program,) = [p for p in _programs() if id(p) not in before]
    assert program.primitives == 3
    assert len(program.absorbed) == 1  # the first Gelu


def test_scale_and_shift_by_constants_become_a_linear_post_op():
    n = Net((1, 16, 12, 12))
    a = n.conv("x", 16, 16)
    a = n.op("Add", [n.op("Mul", [a, n.const([0.75])]), n.const(np.float32(-0.25))])
    data = n.model(n.conv(a, 16, 16))
    gc.collect()
    before = set(map(id, _programs()))
    _check(data, (1, 16, 12, 12))
    (program,) = [p for p in _programs() if id(p) not in before]
    assert len(program.absorbed) == 2


@pytest.mark.parametrize("op, bound", [("Max", 0.1), ("Min", 0.3), ("Max", -2.0)])
def test_max_and_min_by_a_constant_become_a_clip_post_op(op, bound):
    """TensorFlow exports write clamps as Max/Min by a scalar (a wake-word embedding model:
    LeakyRelu then Max(x, c) after each convolution); in the group they are clip post-ops."""
    n = Net((1, 16, 12, 12))
    a = n.op("LeakyRelu", [n.conv("x", 16, 16)], alpha=0.2)
    a = n.op(op, [a, n.const(np.array([bound], np.float32))])
    data = n.model(n.conv(a, 16, 16))
    gc.collect()
    before = set(map(id, _programs()))
    _check(data, (1, 16, 12, 12))
    (program,) = [p for p in _programs() if id(p) not in before]
    assert len(program.absorbed) == 2  # the LeakyRelu and the clip


@pytest.mark.parametrize("low, high, absorbed", [(0.0, 6.0, 1), (-np.inf, 0.5, 1), (2.0, -1.0, 0)],
                         ids=["relu6", "upper", "min_above_max"])
def test_clip_of_constant_bounds_is_a_clip_post_op(low, high, absorbed):
    """MobileNet's ReLU6 (Clip(0, 6) after a convolution) is the clip post-op; a Clip whose
    min is above its max (every value is max) keeps its own kernel, outside the group."""
    n = Net((1, 16, 12, 12))
    a = n.op("Clip", [n.conv("x", 16, 16), n.const(np.float32(low)), n.const(np.float32(high))])
    data = n.model(n.conv(a, 16, 16))
    gc.collect()
    before = set(map(id, _programs()))
    _check(data, (1, 16, 12, 12))
    programs = [p for p in _programs() if id(p) not in before]
    assert sum(len(p.absorbed) for p in programs) == absorbed


@pytest.mark.parametrize("op, first", [("Sub", False), ("Sub", True), ("Div", False), ("Div", True)])
def test_sub_and_div_by_a_constant_join_the_group(op, first):
    """x - c (a linear post-op), c - x, x / c and c / x (steps: x * (1 / c) is not x / c)."""
    n = Net((1, 8, 10, 10))
    a = n.op("Sigmoid", [n.conv("x", 8, 8)])  # (0, 1): c / x well conditioned
    c = n.const(np.float32(1.5))
    a = n.op(op, [c, a] if first else [a, c])
    data = n.model(n.conv(a, 8, 8))
    session = _session(data)
    _check(data, (1, 8, 10, 10), session)
    assert [sorted(ops) for ops in _groups(session).values()] == [sorted(["Conv", "Sigmoid", op, "Conv"])]


@pytest.mark.parametrize("op", ["Add", "Mul", "Sub", "Div"])
def test_a_one_element_constant_of_higher_rank_keeps_its_node_out_of_the_group(op):
    """x op c with c of shape (1, 1, 1, 1, 1) is 5-D by broadcasting: as a scalar in the
    group its result was 4-D (found by trying new real-model patterns)."""
    n = Net((1, 8, 10, 10))
    a = n.op("Relu", [n.conv("x", 8, 8)])
    a = n.op(op, [n.conv(a, 8, 8), n.const(np.full((1, 1, 1, 1, 1), 2.0, np.float32))])
    got = _check(n.model(a), (1, 8, 10, 10))
    assert got[0].shape == (1, 1, 8, 10, 10)


def test_max_of_two_tensors_is_no_post_op():
    n = Net((1, 8, 10, 10))
    a, b = n.conv("x", 8, 8), n.conv("x", 8, 8)
    data = n.model(n.conv(n.op("Max", [a, b]), 8, 8))
    gc.collect()
    before = set(map(id, _programs()))
    _check(data, (1, 8, 10, 10))
    assert all(not p.absorbed for p in _programs() if id(p) not in before)


def test_a_per_channel_constant_operand_keeps_its_node_out_of_the_group():
    """Conv, then Mul and Add by (1, C, 1, 1) constants, as at ORT_DISABLE_ALL (BASIC folds
    them): the constants are in NCHW, the group's values in its own layout, so those nodes run
    on their own (it raised 'operands could not be broadcast (2,16,16,8) (1,8,1,1)')."""
    n = Net((2, 8, 16, 16))
    a = n.conv("x", 8, 8)
    a = n.op("Add", [n.op("Mul", [a, n.const(np.linspace(0.5, 1.5, 8).reshape(1, 8, 1, 1))]),
                     n.const(np.linspace(-0.2, 0.2, 8).reshape(1, 8, 1, 1))])
    data = n.model(n.conv(n.op("Relu", [a]), 8, 8))
    session = _session(data)
    grouped = [op for ops in _groups(session).values() for op in ops]
    assert "Mul" not in grouped and "Add" not in grouped
    _check(data, (2, 8, 16, 16), session)


def test_squeeze_excite_broadcast_mul_runs_in_the_layout(reorders):
    n = Net((2, 40, 10, 10))
    x = n.conv("x", 40, 40, group=40, activation="Relu")  # depthwise
    se = n.op("GlobalAveragePool", [x])
    se = n.conv(se, 40, 10, k=1, pads=[0, 0, 0, 0], activation="Relu")
    se = n.op("HardSigmoid", [n.conv(se, 10, 40, k=1, pads=[0, 0, 0, 0])], alpha=0.2, beta=0.5)
    y = n.conv(n.op("Mul", [x, se]), 40, 24, k=1, pads=[0, 0, 0, 0])
    data = n.model(y)
    session = _session(data)
    assert list(_groups(session).values()) == [["FusedConv", "GlobalAveragePool", "FusedConv", "Conv",
                                                "HardSigmoid", "Mul", "Conv"]]
    _check(data, (2, 40, 10, 10), session)
    assert len(reorders) == 1


def test_pre_activation_dense_block_is_one_group(reorders):
    """DenseNet's layers (Concat -> BatchNormalization -> Relu -> Conv, the BatchNormalization
    not foldable into a convolution before it) stay in one group: each BatchNormalization
    outside split it, with reorders at both ends (DenseNet-121: 62 groups, now 1)."""
    n = Net((2, 8, 12, 12))
    features = [n.conv("x", 8, 8)]  # the stem
    channels = 8
    for _ in range(3):
        x = features[0] if len(features) == 1 else n.op("Concat", features, axis=1)
        bn = n.op("BatchNormalization", [x, n.const(n.rng.uniform(0.5, 1.5, channels)), n.const(n.rng.standard_normal(channels)),
                                         n.const(n.rng.standard_normal(channels) * 0.1), n.const(n.rng.uniform(0.5, 2, channels))])
        features.append(n.conv(n.op("Relu", [bn]), channels, 4))
        channels += 4
    data = n.model(n.op("Concat", features, axis=1))
    session = _session(data)
    groups = list(_groups(session).values())
    assert len(groups) == 1 and groups[0].count("BatchNormalization") == 3
    _check(data, (2, 8, 12, 12), session)
    assert len(reorders) <= 2  # in and out


@pytest.mark.parametrize("axes_as", ["attribute", "input"])
def test_squeeze_excite_spatial_reduce_mean_is_a_pool_of_the_group(reorders, axes_as):
    """torch's dynamo exporter writes squeeze-excite's mean as ReduceMean over H and W (dims
    kept): the group holds it as a GlobalAveragePool; a mean over the channels is no member."""
    n = Net((2, 40, 10, 10))
    x = n.conv("x", 40, 40, group=40, activation="Relu")
    if axes_as == "attribute":
        se = n.op("ReduceMean", [x], axes=[-1, 2], keepdims=1)
    else:
        se = n.op("ReduceMean", [x, n.const(np.array([2, 3]))], keepdims=1)
        n.inits[-1] = onnx.numpy_helper.from_array(np.array([2, 3], np.int64), n.inits[-1].name)
    se = n.op("Sigmoid", [n.conv(se, 40, 40, k=1, pads=[0, 0, 0, 0])])
    channel_mean = n.op("ReduceMean", [x], axes=[1], keepdims=1)
    y = n.conv(n.op("Mul", [x, se]), 40, 24, k=1, pads=[0, 0, 0, 0])
    data = n.model(y, channel_mean)
    if axes_as == "input":  # ReduceMean takes its axes as an input from opset 18
        model = onnx.load_from_string(data)
        model.opset_import[0].version = 18
        model.graph.node.remove(next(nd for nd in model.graph.node if nd.output[0] == channel_mean))
        model.graph.output.pop()
        data = model.SerializeToString()
        channel_mean = None
    session = _session(data)
    groups = list(_groups(session).values())
    assert ["FusedConv", "ReduceMean", "Conv", "Sigmoid", "Mul", "Conv"] in groups
    assert all(ops.count("ReduceMean") <= 1 for ops in groups)  # the channel mean runs on its own
    _check(data, (2, 40, 10, 10), session)


@pytest.mark.parametrize("attrs", [
    {"strides": [2, 2]},
    {"dilations": [2, 2], "pads": [2, 2, 2, 2]},
    {"pads": [0, 1, 2, 0]},
    {"auto_pad": "SAME_UPPER", "strides": [2, 1], "pads": None},
])
def test_convolution_geometries(attrs):
    n = Net((1, 12, 13, 9))
    a = n.conv("x", 12, 20, **attrs)
    data = n.model(n.conv(a, 20, 8, group=4, activation="Relu"))
    assert len(_groups(_session(data))) == 1
    _check(data, (1, 12, 13, 9))


@pytest.mark.parametrize("op, attrs", [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [2, 3], "strides": [2, 2], "pads": [0, 1, 1, 0]}),
])
def test_pools_between_convolutions(op, attrs):
    n = Net((1, 16, 11, 12))
    a = n.op(op, [n.conv("x", 16, 16, activation="Relu")], **attrs)
    data = n.model(n.conv(n.op("Relu", [a]), 16, 16))  # a Relu after a pool: numpy on the layout
    assert list(_groups(_session(data)).values()) == [["FusedConv", op, "Relu", "Conv"]]
    _check(data, (1, 16, 11, 12))


def test_values_read_outside_the_group_and_graph_outputs_inside_it():
    n = Net((1, 8, 8, 8))
    a = n.conv("x", 8, 16, activation="Relu")
    b = n.conv(a, 16, 16)  # a graph output that a member reads too: no post-op absorbs it
    c = n.op("Relu", [b])
    d = n.conv(c, 16, 16)
    outside = n.op("Softmax", [a], axis=1)
    data = n.model(d, b, outside)
    session = _session(data)
    assert list(_groups(session).values()) == [["FusedConv", "Conv", "Relu", "Conv"]]
    _check(data, (1, 8, 8, 8), session)


def test_residual_addend_made_after_the_convolution_and_read_twice():
    n = Net((1, 16, 8, 8))
    x = n.conv("x", 16, 16, activation="Relu")
    main = n.conv(x, 16, 16)
    shortcut = n.conv(x, 16, 16, k=1, pads=[0, 0, 0, 0])  # made after main: the sum goes on it
    y = n.op("Relu", [n.op("Add", [main, shortcut])])
    z = n.op("Add", [y, x])  # x is read again: the sum into it copies it first
    data = n.model(n.conv(z, 16, 8))
    gc.collect()
    before = set(map(id, _programs()))
    _check(data, (1, 16, 8, 8))
    (program,) = [p for p in _programs() if id(p) not in before]
    sums = [step[0] for step in program.steps if isinstance(step[0], onednn_group._SumInto)]
    assert len(sums) == 1  # the second Add's convolution output is read by a Relu first: not absorbed
    assert len(program.absorbed) == 2


@pytest.mark.parametrize("before", ["conv", "relu", "silu"])
@pytest.mark.parametrize("after", ["none", "relu", "silu"])
@pytest.mark.parametrize("k", [3, 1])
def test_residual_addend_that_is_the_convolutions_own_input(before, after, k):
    """y = a + f(Conv(a)) with a made inside the group (PP-OCRv6's recogniser): the sum may not
    be written into a's array, which the convolution is still reading (it was, before: up to 16
    off from onnxruntime with a 3x3 kernel)."""
    n = Net((1, 16, 6, 20))
    a = n.conv("x", 16, 16, k=1, pads=[0, 0, 0, 0])
    if before == "relu":
        a = n.op("Relu", [a])
    elif before == "silu":
        a = n.op("Mul", [a, n.op("Sigmoid", [a])])
    b = n.conv(a, 16, 16, k=k)
    if after == "relu":
        b = n.op("Relu", [b])
    elif after == "silu":
        b = n.op("Mul", [b, n.op("Sigmoid", [b])])
    data = n.model(n.op("Add", [a, b]))
    gc.collect()
    before_programs = set(map(id, _programs()))
    _check(data, (1, 16, 6, 20))
    (program,) = [p for p in _programs() if id(p) not in before_programs]
    sums = [step[0] for step in program.steps if isinstance(step[0], onednn_group._SumInto)]
    assert sums and not any(s.in_place for s in sums)


def test_no_cycle_through_a_node_outside_the_group():
    n = Net((1, 8, 6, 6))
    a = n.conv("x", 8, 8)
    outside = n.op("Softmax", [a], axis=1)  # not a member, reads the group, feeds it again
    b = n.conv(a, 8, 8)
    data = n.model(n.conv(n.op("Add", [b, outside]), 8, 8))
    session = _session(data)
    placement = session.get_placement()
    assert not any(p.declined for p in placement.nodes)
    groups = _groups(session)
    assert ["Conv", "Conv"] in groups.values()  # the Add cannot join the first convolutions' group
    _check(data, (1, 8, 6, 6), session)


def test_a_group_inside_a_control_flow_body_reads_outer_values():
    n = Net((1, 8, 6, 6))
    body = Net((1, 8, 6, 6), seed=3)
    a = body.conv("x", 8, 8, activation="Relu")  # "x" is the outer graph's input
    b = body.op("Relu", [body.op("Add", [body.conv(a, 8, 8), "x"])])
    branch = helper.make_graph(body.nodes, "branch", [], [helper.make_tensor_value_info(b, TensorProto.FLOAT, None)],
                               body.inits)
    n.inits.append(onnx.numpy_helper.from_array(np.array(True), "cond"))
    y = n.op("If", ["cond"], then_branch=branch, else_branch=branch)
    session = _session(n.model(y))
    in_body = [p for p in session.get_placement().nodes if p.graph]  # both branches, 4 nodes each
    assert len(in_body) == 8 and {p.group for p in in_body} == {0}
    _check(n.model(y), (1, 8, 6, 6), session)


def test_new_batch_sizes_make_new_programs():
    n = Net(("batch", 8, 10, 10))
    data = n.model(_resnet_block(n, n.conv("x", 8, 16, activation="Relu"), 16))
    session = _session(data)
    for batch in (1, 3, 1):
        _check(data, (batch, 8, 10, 10), session, seed=batch)


def test_members_oneDNN_declines_run_their_own_kernels(monkeypatch):
    n = Net((1, 8, 10, 10))
    x = n.op("MaxPool", [n.conv("x", 8, 16, activation="Relu")], kernel_shape=[2, 2])
    data = n.model(_resnet_block(n, x, 16))
    real = _onednn.Convolution

    def second_declined(lib, x_shape, w, *args, **kwargs):
        if w.shape[:2] == (16, 16) and kwargs.get("x_layout") and len(calls) == 0:
            calls.append(1)
            raise _onednn.OneDNNError("declined for the test")
        return real(lib, x_shape, w, *args, **kwargs)

    calls: list[int] = []
    monkeypatch.setattr(_onednn, "Convolution", second_declined)
    _check(data, (1, 8, 10, 10))
    assert calls == [1]

    def all_declined(*args, **kwargs):
        raise _onednn.OneDNNError("declined for the test")

    monkeypatch.setattr(_onednn, "Convolution", all_declined)
    monkeypatch.setattr(_onednn, "Pooling", all_declined)
    _check(data, (1, 8, 10, 10))


def _fpn(n: Net, x: str, c: int, mode: str = "nearest", **resize_attrs) -> str:
    """A feature-pyramid head: two levels, the coarse one resized up and added to the fine one,
    both resized to the finest and joined along channels (as PaddleOCR's detector does)."""
    fine = n.conv(x, c, c, activation="Relu")
    coarse = n.conv(fine, c, c, strides=[2, 2], activation="Relu")
    up = n.op("Resize", [coarse, "", n.const([1, 1, 2, 2])], mode=mode, **resize_attrs)
    merged = n.conv(n.op("Add", [up, fine]), c, c)
    joined = n.op("Concat", [merged, n.op("Resize", [coarse, "", n.const([1, 1, 2, 2])], mode=mode, **resize_attrs)],
                  axis=1)
    return n.conv(joined, 2 * c, c)


@pytest.mark.parametrize("mode, attrs", [
    ("nearest", {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}),
    ("nearest", {}),
    ("linear", {}),
    ("linear", {"coordinate_transformation_mode": "align_corners"}),
])
def test_resize_and_concat_join_the_group(reorders, mode, attrs):
    n = Net((2, 16, 10, 12))
    data = n.model(_fpn(n, "x", 16, mode, **attrs))
    session = _session(data)
    assert list(_groups(session).values()) == [["FusedConv", "FusedConv", "Resize", "Add", "Conv", "Resize", "Concat",
                                                "Conv"]]
    _check(data, (2, 16, 10, 12), session)
    assert len(reorders) == 1  # the output back to NCHW: nothing in between leaves the layout


def test_resize_and_concat_that_stay_out_of_groups():
    n = Net((1, 8, 6, 6))
    a = n.conv("x", 8, 8)
    sized = n.op("Resize", [a, "", "", n.const(np.array([1, 8, 12, 12], np.int64))], mode="nearest")
    n.inits[-1] = onnx.numpy_helper.from_array(np.array([1, 8, 12, 12], np.int64), n.inits[-1].name)
    widths = n.op("Concat", [n.conv(sized, 8, 8), sized], axis=3)  # along W
    data = n.model(n.conv(widths, 8, 8))
    session = _session(data)
    grouped = [op for ops in _groups(session).values() for op in ops]
    assert "Resize" not in grouped and "Concat" not in grouped
    _check(data, (1, 8, 6, 6), session)


@pytest.mark.parametrize("layout", sorted(_onednn.LAYOUTS))
def test_reorders_into_each_layout_and_back(layout):
    lib = _onednn.library()
    x = np.random.default_rng(0).standard_normal((2, 20, 5, 7)).astype(np.float32)  # 20: not a block multiple
    inside = np.full(_onednn.layout_shape(x.shape, layout), np.nan, np.float32)
    _onednn.Reorder(lib, x.shape, "", layout).run(x, inside)
    if layout == "nhwc":
        want = x.transpose(0, 2, 3, 1)
    else:
        block = inside.shape[-1]
        padded = np.zeros((2, inside.shape[1] * block, 5, 7), np.float32)
        padded[:, :20] = x
        want = padded.reshape(2, inside.shape[1], block, 5, 7).transpose(0, 1, 3, 4, 2)
    np.testing.assert_array_equal(inside, want)  # the padding channels are zeros, not left as they were
    back = np.empty_like(x)
    _onednn.Reorder(lib, x.shape, layout, "").run(inside, back)
    np.testing.assert_array_equal(back, x)


@pytest.mark.parametrize("layout", ["nChw16c", "nChw8c"])
def test_groups_in_the_blocked_layouts_other_cpus_get(monkeypatch, layout):
    # this CPU's oneDNN chooses nhwc; a group in a blocked layout (channels padded to the block)
    # must give the same values, the elementwise members and broadcasts included
    monkeypatch.setattr(_onednn._Library, "layout", lambda self: layout)
    n = Net((2, 20, 9, 9))
    x = _resnet_block(n, n.conv("x", 20, 20, activation="Relu"), 20)
    se = n.op("GlobalAveragePool", [x])
    se = n.op("HardSigmoid", [n.conv(se, 20, 20, k=1, pads=[0, 0, 0, 0])], alpha=0.2, beta=0.5)
    y = n.op("MaxPool", [n.op("Mul", [x, se])], kernel_shape=[2, 2], strides=[2, 2])
    y = _fpn(n, n.conv(n.op("Mul", [y, n.const([1.5])]), 20, 12), 12)  # Resize on the blocked array, Concat in NCHW
    data = n.model(y)
    session = _session(data)
    assert len(_groups(session)) == 1
    gc.collect()
    before = set(map(id, _programs()))
    _check(data, (2, 20, 9, 9), session)
    (program,) = [p for p in _programs() if id(p) not in before]
    # oneDNN runs what it implements in that layout here (on an AVX-512 CPU, not the 12-channel
    # convolutions in nChw16c: its reference loop only; on an AVX2 one, nothing in nChw16c); the
    # rest run their own kernels
    assert program.layout == layout
    if layout == "nChw8c" or "avx512f" in host_cpu().flags:
        assert program.primitives >= 1


def test_subnormal_weights_are_flushed_as_elsewhere(monkeypatch):
    # a subnormal weight costs oneDNN a microcode assist per multiply as it does BLAS
    # (_util.constant_weight): the group's convolutions get the flushed copy too
    n = Net((1, 16, 8, 8))
    a = n.conv("x", 16, 16, activation="Relu")
    data = n.model(n.conv(a, 16, 16))
    proto = onnx.load_from_string(data)
    for init in proto.graph.initializer:
        w = onnx.numpy_helper.to_array(init).copy()
        if w.ndim == 4:
            w[np.random.default_rng(0).random(w.shape) < 0.3] = np.float32(1e-39)
            init.CopyFrom(onnx.numpy_helper.from_array(w, init.name))
    given: list[np.ndarray] = []
    real = _onednn.Convolution
    monkeypatch.setattr(_onednn, "Convolution", lambda lib, x_shape, w, *a, **k: given.append(w) or real(lib, x_shape, w, *a, **k))
    data = proto.SerializeToString()
    _check(data, (1, 16, 8, 8))
    assert len(given) == 2
    assert not any(((np.abs(w) < np.finfo(np.float32).tiny) & (w != 0)).any() for w in given)


def test_what_does_not_form_a_group():
    n = Net((1, 8, 6, 6))
    single = n.model(n.op("Relu", [n.conv("x", 8, 8)]))  # one convolution saves no reorder
    assert _groups(_session(single)) == {}

    n = Net((1, 8, 6))  # 1-D convolutions
    w = n.const(np.ones((8, 8, 3), np.float32))
    a = n.op("Conv", ["x", w], kernel_shape=[3], pads=[1, 1])
    assert _groups(_session(n.model(n.op("Conv", [a, w], kernel_shape=[3], pads=[1, 1])))) == {}


def test_weights_fed_at_run_time_keep_the_node_out_of_groups():
    n = Net((1, 4, 5, 5))
    a = n.conv("x", 4, 4)
    w = n.const(np.ones((4, 4, 3, 3), np.float32))
    b = n.op("Conv", [a, w], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    proto = onnx.load_from_string(n.model(n.conv(b, 4, 4)))
    proto.graph.input.append(helper.make_tensor_value_info(w, TensorProto.FLOAT, [4, 4, 3, 3]))
    session = _session(proto.SerializeToString())
    assert all("Conv" not in ops or len(ops) < 3 for ops in _groups(session).values())
    x = np.ones((1, 4, 5, 5), np.float32)
    fed = {"x": x, w: np.full((4, 4, 3, 3), 2.0, np.float32)}
    want = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, fed)
    np.testing.assert_allclose(session.run(None, fed)[0], want[0], rtol=TOL, atol=TOL)


def test_a_failure_forming_groups_is_logged_and_the_nodes_run_one_by_one(monkeypatch, caplog):
    n = Net((1, 8, 6, 6))
    data = n.model(_resnet_block(n, n.conv("x", 8, 8), 8))

    def broken(graph, claimed):
        raise RuntimeError("a bug in group forming")

    monkeypatch.setattr(onednn_group, "groups", broken)
    with caplog.at_level("WARNING", logger="ort_core"):
        session = _session(data)
    assert _groups(session) == {}
    assert "no oneDNN groups in graph main: RuntimeError: a bug in group forming" in caplog.text
    _check(data, (1, 8, 6, 6), session)


def test_errors_inside_a_group_name_the_member_node(monkeypatch):
    # shapes that do not fit: the program is not made and the members' own kernels say why
    n = Net((1, 8, "h", "w"))
    a = n.conv("x", 8, 8, activation="Relu")
    b = n.conv(a, 8, 8, strides=[2, 2])
    data = n.model(n.conv(n.op("Add", [a, b]), 8, 8))
    session = _session(data)
    assert len(_groups(session)) == 1
    with pytest.raises(ort.Fail, match=r"Add node 'add\d+' of the oneDNN group: ValueError: operands could not be"):
        session.run(None, {"x": np.ones((1, 8, 6, 6), np.float32)})
    # a step of a program that fails at run time
    n = Net((1, 8, 6, 6))
    x = n.op("MaxPool", [n.conv("x", 8, 8, activation="Relu")], kernel_shape=[2, 2])
    data = n.model(n.conv(x, 8, 8))

    def fails(self, x, y):
        raise _onednn.OneDNNError("dnnl_primitive_execute failed for the test")

    monkeypatch.setattr(_onednn.Pooling, "run", fails)
    with pytest.raises(ort.Fail, match=r"MaxPool node 'maxpool\d+' of the oneDNN group: OneDNNError: dnnl_primitive"):
        _session(data).run(None, {"x": np.ones((1, 8, 6, 6), np.float32)})


def test_switched_off_without_onednn(monkeypatch):
    n = Net((1, 8, 6, 6))
    data = n.model(_resnet_block(n, n.conv("x", 8, 8), 8))
    monkeypatch.setattr(_onednn, "USE", False)
    assert _groups(_session(data)) == {}


def _run_session(session, x):
    return session.run(None, {"x": x})[0]


def test_a_forked_child_runs_the_members_own_kernels():
    n = Net((1, 16, 10, 10))
    data = n.model(_resnet_block(n, n.conv("x", 16, 16, activation="Relu"), 16))
    session = _session(data)
    assert _groups(session)
    x = np.random.default_rng(1).standard_normal((1, 16, 10, 10)).astype(np.float32)
    want = session.run(None, {"x": x})[0]  # the parent's OpenMP pool has run
    np.testing.assert_allclose(in_forked_child(_run_session, session, x), want, rtol=TOL, atol=TOL)


def test_concurrent_runs():
    n = Net((2, 16, 12, 12))
    data = n.model(_resnet_block(n, _resnet_block(n, n.conv("x", 16, 16, activation="Relu"), 16), 16))
    session = _session(data)
    xs = [np.random.default_rng(k).standard_normal((2, 16, 12, 12)).astype(np.float32) for k in range(4)]
    wants = [session.run(None, {"x": x})[0] for x in xs]
    runs_agree(lambda x: session.run(None, {"x": x})[0], xs, wants)  # the same values as one at a time


def _silu(n: Net, x):
    return n.op("Mul", [x, n.op("Sigmoid", [x])])


@pytest.mark.parametrize("sizes", [None, [4, 12]], ids=["equal_parts", "split_input"])
def test_a_c2f_block_with_split_and_silu_is_one_group(reorders, sizes):
    """YOLOv8's C2f block: a convolution's SiLU output split along channels, a bottleneck on
    one part, everything concatenated. The Split stays in the layout (each part a slice of the
    nhwc channels) and each SiLU (x * Sigmoid(x)) is the convolution's swish post-op."""
    if _onednn.library().layout() != "nhwc":
        pytest.skip(f"Split joins groups in nhwc only; this CPU's oneDNN chooses {_onednn.library().layout()}")
    n = Net((2, 8, 12, 10))
    a = _silu(n, n.conv("x", 8, 16, k=1, pads=[0, 0, 0, 0]))
    parts = [n._name("part"), n._name("part")]
    inputs = [a] if sizes is None else [a, n._name("sizes")]
    if sizes is not None:
        n.inits.append(onnx.numpy_helper.from_array(np.array(sizes, np.int64), inputs[1]))
    n.nodes.append(helper.make_node("Split", inputs, parts, name="split", axis=1))
    second = 8 if sizes is None else sizes[1]
    b = _silu(n, n.conv(_silu(n, n.conv(parts[1], second, second)), second, second))
    joined = n.op("Concat", [parts[0], parts[1], b], axis=1)
    data = n.model(_silu(n, n.conv(joined, 16 + second, 8, k=1, pads=[0, 0, 0, 0])))
    session = _session(data)
    groups = list(_groups(session).values())
    assert len(groups) == 1 and "Split" in groups[0] and len(groups[0]) == 14, groups
    gc.collect()
    before = set(map(id, _programs()))
    _check(data, (2, 8, 12, 10), session)
    assert len(reorders) == 1  # the output back to NCHW: the Split's parts stay in the layout
    (program,) = [p for p in _programs() if id(p) not in before]
    assert len(program.absorbed) == 8  # four SiLUs, a Sigmoid and a Mul each


def test_a_sigmoid_read_elsewhere_is_no_swish():
    """x * Sigmoid(x) where the Sigmoid's output is also a graph output: both stay members."""
    n = Net((1, 8, 9, 9))
    a = n.conv("x", 8, 8)
    s = n.op("Sigmoid", [a])
    m = n.op("Mul", [a, s])
    data = n.model(n.conv(m, 8, 8), s)
    gc.collect()
    before = set(map(id, _programs()))
    _check(data, (1, 8, 9, 9))
    (program,) = [p for p in _programs() if id(p) not in before]
    assert len(program.absorbed) == 0
