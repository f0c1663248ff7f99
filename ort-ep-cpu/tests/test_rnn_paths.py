"""LSTM/GRU/RNN keep R transposed per R array between runs: parity with onnxruntime when R is a
constant (made once) and when R is fed at run time and changes (never stale). Tolerance: rtol
1e-5, atol 1e-5 (float32, one recurrence)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from compiled_loops import use_compiled
from onnx import TensorProto, helper

import ort_core as ort
from ort_ep_cpu.kernels import _onednn, rnn


def _model(op: str, gates: int, hidden: int, inp: int, dirs: int, const_r: bool, rng):
    direction = "bidirectional" if dirs == 2 else "forward"
    w = rng.standard_normal((dirs, gates * hidden, inp)).astype(np.float32) * 0.3
    r = rng.standard_normal((dirs, gates * hidden, hidden)).astype(np.float32) * 0.3
    b = rng.standard_normal((dirs, 2 * gates * hidden)).astype(np.float32) * 0.1
    inits = [onnx.numpy_helper.from_array(w, "W"), onnx.numpy_helper.from_array(b, "B")]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, None, inp])]
    if const_r:
        inits.append(onnx.numpy_helper.from_array(r, "R"))
    else:
        inputs.append(helper.make_tensor_value_info("R", TensorProto.FLOAT, list(r.shape)))
    node = helper.make_node(op, ["X", "W", "R", "B"], ["Y", "Y_h"], hidden_size=hidden, direction=direction)
    graph = helper.make_graph([node], "g", inputs, [
        helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None] * 4),
        helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, [None] * 3),
    ], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model.SerializeToString(), r


@pytest.mark.parametrize("op,gates", [("LSTM", 4), ("GRU", 3), ("RNN", 1)])
@pytest.mark.parametrize("dirs", [1, 2])
@pytest.mark.parametrize("const_r", [True, False])
@pytest.mark.parametrize("batch", [2, 5])  # (5: an LSTM's R in packed panels, kept per R array too)
def test_recurrence_weights_cached_per_array(op, gates, dirs, const_r, batch):
    rng = np.random.default_rng(0)
    data, r = _model(op, gates, hidden=6, inp=5, dirs=dirs, const_r=const_r, rng=rng)
    ref = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for run in range(3):
        feeds = {"X": rng.standard_normal((4, batch, 5)).astype(np.float32)}
        if not const_r:  # a different R every run: a cached transpose of the first would be wrong
            feeds["R"] = r + np.float32(run * 0.2)
        for a, b in zip(got.run(None, feeds), ref.run(None, feeds)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def _lstm_step_model(hidden: int, inp: int, const_r: bool, rng, **attrs):
    w = rng.standard_normal((1, 4 * hidden, inp)).astype(np.float32) * 0.3
    r = rng.standard_normal((1, 4 * hidden, hidden)).astype(np.float32) * 0.3
    b = rng.standard_normal((1, 8 * hidden)).astype(np.float32) * 0.1
    inits = [onnx.numpy_helper.from_array(w, "W"), onnx.numpy_helper.from_array(b, "B")]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, None, inp]),
              helper.make_tensor_value_info("H0", TensorProto.FLOAT, [1, None, hidden]),
              helper.make_tensor_value_info("C0", TensorProto.FLOAT, [1, None, hidden])]
    if const_r:
        inits.append(onnx.numpy_helper.from_array(r, "R"))
    else:
        inputs.append(helper.make_tensor_value_info("R", TensorProto.FLOAT, list(r.shape)))
    node = helper.make_node("LSTM", ["X", "W", "R", "B", "", "H0", "C0"], ["Y", "Y_h", "Y_c"], hidden_size=hidden,
                            **attrs)
    graph = helper.make_graph([node], "g", inputs, [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, [None] * k) for n, k in (("Y", 4), ("Y_h", 3), ("Y_c", 3))
    ], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model.SerializeToString(), r


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("const_r", [True, False])
# tf2onnx writes the default activations out (the g2p decoder): still the single-step path
@pytest.mark.parametrize("attrs", [{}, {"activations": ["Sigmoid", "Tanh", "Tanh"]}], ids=["implicit", "explicit"])
@pytest.mark.parametrize("compiled", ["step", "cells", "numpy"], ids=["compiled_step", "compiled_cells", "numpy_cells"])
def test_lstm_single_step_matches_onnxruntime(batch, const_r, attrs, compiled, monkeypatch):
    """One time step (the streaming case) takes one GEMM of [x, h] by [W; R], its gates by the
    compiled cell or numpy: Y, Y_h and Y_c match onnxruntime, carrying the state over three
    runs, and the fed states are left as they were; with R fed at run time and changing, the
    stacked weights are remade (never stale). Y_h is not a view of Y (a caller may write it).
    Where the product is not split (``ROW_SPLIT_MACS``), the product and the cells are one
    compiled call (``_jit.lstm_step``; x of 5 values, not a multiple of the four rows a pass);
    where it is, the row product then the compiled cells."""
    if compiled == "cells":  # the product large enough to be split
        monkeypatch.setattr(rnn, "ROW_SPLIT_MACS", 1)
    steps = use_compiled(monkeypatch, compiled != "numpy", "lstm_step")
    cells = use_compiled(monkeypatch, compiled != "numpy", "lstm_cells")
    calls = []
    step = rnn._LSTM._single_step
    monkeypatch.setattr(rnn._LSTM, "_single_step", lambda self, *a: calls.append(1) or step(self, *a))
    rng = np.random.default_rng(1)
    data, r = _lstm_step_model(hidden=8, inp=5, const_r=const_r, rng=rng, **attrs)
    ref = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    h = rng.standard_normal((1, batch, 8)).astype(np.float32)
    c = rng.standard_normal((1, batch, 8)).astype(np.float32)
    for run in range(3):
        feeds = {"X": rng.standard_normal((1, batch, 5)).astype(np.float32), "H0": h, "C0": c}
        if not const_r:
            feeds["R"] = r + np.float32(run * 0.2)
        fed = {k: v.copy() for k, v in feeds.items()}
        outs, wants = got.run(None, feeds), ref.run(None, feeds)
        for a, b in zip(outs, wants):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
        assert not np.shares_memory(outs[0], outs[1])
        assert all(np.array_equal(feeds[k], fed[k]) for k in feeds)
        h, c = outs[1], outs[2]
    assert len(calls) == 3  # the single-step path ran
    # the compiled loop taken was asked for (numpy: USE off, it answers None)
    assert bool(steps) == (compiled != "numpy") and bool(cells) == (compiled == "cells")


def _recurrent_model(op: str, direction: str, hidden: int, inp: int, attrs: dict, peepholes: bool, rng):
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    dirs = 2 if direction == "bidirectional" else 1
    arrays = {"W": rng.standard_normal((dirs, gates * hidden, inp)) * 0.4,
              "R": rng.standard_normal((dirs, gates * hidden, hidden)) * 0.4,
              "B": rng.standard_normal((dirs, 2 * gates * hidden)) * 0.2}
    if peepholes:
        arrays["P"] = rng.standard_normal((dirs, 3 * hidden)) * 0.3
    inits = [onnx.numpy_helper.from_array(v.astype(np.float32), k) for k, v in arrays.items()]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, None, inp]),
              helper.make_tensor_value_info("lens", TensorProto.INT32, [None]),
              helper.make_tensor_value_info("H0", TensorProto.FLOAT, [dirs, None, hidden])]
    names = ["X", "W", "R", "B", "lens", "H0"]
    outputs = ["Y", "Y_h"]
    if op == "LSTM":
        inputs.append(helper.make_tensor_value_info("C0", TensorProto.FLOAT, [dirs, None, hidden]))
        names += ["C0"] + (["P"] if peepholes else [])
        outputs.append("Y_c")
    node = helper.make_node(op, names, outputs, hidden_size=hidden, direction=direction, **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                                                     for n in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op, attrs, peepholes", [
    ("LSTM", {}, False), ("LSTM", {}, True), ("GRU", {}, False), ("GRU", {"linear_before_reset": 1}, False),
    ("RNN", {}, False), ("RNN", {"activations": ["Relu"]}, False), ("RNN", {"activations": ["Sigmoid"]}, False),
    ("RNN", {"activations": ["Tanh", "Relu"]}, False)])
@pytest.mark.parametrize("ragged", [False, True], ids=["full", "ragged"])
@pytest.mark.parametrize("batch", [2, 3])
def test_compiled_recurrence_matches_onnxruntime(op, attrs, peepholes, direction, ragged, batch, monkeypatch):
    # the whole recurrence of a direction is one compiled call (_jit.lstm_scan / gru_scan)
    from ort_ep_cpu.kernels import _jit

    if not _jit.enabled():
        pytest.skip("numba is not installed")
    if "activations" in attrs and (len(attrs["activations"]) == 2) != (direction == "bidirectional"):
        pytest.skip("onnxruntime takes one activation per direction")
    # (an LSTM of rnn.PANEL_SCAN_ROWS rows or more: the scan with R in packed panels)
    scan_name = {"LSTM": "lstm_panel_scan" if batch >= rnn.PANEL_SCAN_ROWS else "lstm_scan", "GRU": "gru_scan",
                 "RNN": "rnn_scan"}[op]
    real, calls = getattr(_jit, scan_name)(), []
    monkeypatch.setattr(_jit, scan_name, lambda: lambda *args: (calls.append(1), real(*args)))
    monkeypatch.setattr(_onednn, "USE", False)  # (whole sequences: else oneDNN's primitive)
    rng = np.random.default_rng(3)
    data = _recurrent_model(op, direction, hidden=24, inp=7, attrs=attrs, peepholes=peepholes, rng=rng)
    dirs = 2 if direction == "bidirectional" else 1
    feeds = {"X": rng.standard_normal((6, batch, 7)).astype(np.float32),
             "lens": np.array([6, 2, 4][:batch] if ragged else [6] * batch, np.int32),
             "H0": rng.standard_normal((dirs, batch, 24)).astype(np.float32) * 0.5}
    if op == "LSTM":
        feeds["C0"] = rng.standard_normal((dirs, batch, 24)).astype(np.float32) * 0.5
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert len(calls) == dirs


def _primitives_made(monkeypatch, argument: int) -> list:
    """Skips where oneDNN is absent; else spies on ``_onednn.Recurrence``: the list grows by
    argument ``argument`` of each primitive made (1: the cell, 3: the input shape)."""
    if not _onednn.available():
        pytest.skip("oneDNN (onednn-cpu-gomp) is not installed")
    made: list = []
    real_init = _onednn.Recurrence.__init__
    monkeypatch.setattr(_onednn.Recurrence, "__init__", lambda self, *a: made.append(a[argument]) or real_init(self, *a))
    return made


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op, attrs, peepholes", [
    ("LSTM", {}, False), ("LSTM", {}, True), ("LSTM", {"layout": 1}, False),
    ("LSTM", {"activations": ["Sigmoid", "Tanh", "Tanh"]}, False),
    ("GRU", {}, False), ("GRU", {"linear_before_reset": 1}, False), ("GRU", {"layout": 1}, False)])
@pytest.mark.parametrize("batch, hidden", [(1, 24), (3, 24), (1, 160)])  # (160: on two threads)
def test_onednn_recurrence_matches_onnxruntime(op, attrs, peepholes, direction, batch, hidden, monkeypatch):
    """LSTM and GRU of constant weights over whole sequences (no sequence_lens, or every length
    the sequence's): one oneDNN primitive (``_onednn.Recurrence``) for the node from a shape's
    second run (its first is the compiled scan's), its gates and biases reordered from ONNX's; Y, Y_h, Y_c as onnxruntime's, in either layout, with the
    initial states fed and absent. Tolerance: rtol 1e-5, atol 1e-5 (float32)."""
    if "activations" in attrs and direction == "bidirectional":
        pytest.skip("onnxruntime takes the activations of each direction")
    made, runs = _primitives_made(monkeypatch, 1), []
    real_run = _onednn.Recurrence.run
    monkeypatch.setattr(_onednn.Recurrence, "run", lambda self, *a: runs.append(1) or real_run(self, *a))
    rng = np.random.default_rng(5)
    inp, seq, dirs = 7, 6, 2 if direction == "bidirectional" else 1
    layout = attrs.get("layout", 0)
    data = _recurrent_model(op, direction, hidden=hidden, inp=inp, attrs=attrs, peepholes=peepholes,
                            rng=np.random.default_rng(5))
    # onnxruntime has no layout 1: its reference is the layout-0 model, fed and read transposed
    ref_attrs = {k: v for k, v in attrs.items() if k != "layout"}
    ref_data = _recurrent_model(op, direction, hidden=hidden, inp=inp, attrs=ref_attrs, peepholes=peepholes,
                                rng=np.random.default_rng(5))
    if layout:  # the model's inputs are batch-major
        model = onnx.load_from_string(data)
        for value in model.graph.input:
            if value.name in ("X", "H0", "C0"):
                value.type.tensor_type.ClearField("shape")
        data = model.SerializeToString()
    ref = onnxruntime.InferenceSession(ref_data, providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"])

    def batch_major(shape):
        return (shape[1], shape[0], shape[2]) if layout else shape

    for fed_states in (True, False):
        feeds = {"X": rng.standard_normal(batch_major((seq, batch, inp))).astype(np.float32),
                 "lens": np.full(batch, seq, np.int32)}
        if fed_states:
            feeds["H0"] = rng.standard_normal(batch_major((dirs, batch, hidden))).astype(np.float32) * 0.5
            if op == "LSTM":
                feeds["C0"] = rng.standard_normal(batch_major((dirs, batch, hidden))).astype(np.float32) * 0.5
        else:
            feeds["H0"] = np.zeros(batch_major((dirs, batch, hidden)), np.float32)
            if op == "LSTM":
                feeds["C0"] = np.zeros(batch_major((dirs, batch, hidden)), np.float32)
        ref_feeds = {k: v.swapaxes(0, 1) if layout and v.ndim == 3 else v for k, v in feeds.items()}
        wants = ref.run(None, ref_feeds)
        if layout:  # Y (batch, seq, dirs, hidden), the states (batch, dirs, hidden)
            wants = [wants[0].transpose(2, 0, 1, 3)] + [w.swapaxes(0, 1) for w in wants[1:]]
        for _ in range(2):  # (a shape's first run is the compiled scan's, its second the primitive's)
            for a, b in zip(got.run(None, feeds), wants):
                assert a.shape == b.shape
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    cell = {"LSTM": _onednn.LSTM, "GRU": _onednn.LINEAR_BEFORE_RESET_GRU if attrs.get("linear_before_reset")
            else _onednn.GRU}[op]
    assert made == [cell] and len(runs) == 3  # one primitive, made at the shape's second run


def test_onednn_recurrence_leaves_ragged_sequences_and_fed_weights(monkeypatch):
    """Sequences of several lengths (oneDNN's primitive runs every row the whole sequence) and
    R fed at run time (a primitive packs its weights once) keep the compiled or numpy scan."""
    made = _primitives_made(monkeypatch, 1)
    rng = np.random.default_rng(6)
    data = _recurrent_model("LSTM", "forward", hidden=16, inp=5, attrs={}, peepholes=False, rng=rng)
    feeds = {"X": rng.standard_normal((6, 3, 5)).astype(np.float32), "lens": np.array([6, 2, 4], np.int32),
             "H0": np.zeros((1, 3, 16), np.float32), "C0": np.zeros((1, 3, 16), np.float32)}
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for _ in range(2):
        for a, b in zip(got.run(None, feeds), want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    data, r = _model("LSTM", 4, hidden=16, inp=5, dirs=1, const_r=False, rng=rng)
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for _ in range(2):
        got.run(None, {"X": rng.standard_normal((6, 2, 5)).astype(np.float32), "R": r})
    assert made == []


def test_compiled_exp_tanh_sigmoid_are_float32_accurate():
    # the recurrences' own vectorisable exp (no libm call): within float32 rounding of the truth
    import numba

    from ort_ep_cpu.kernels import _jit

    if not _jit.enabled():
        pytest.skip("numba is not installed")

    @numba.njit
    def apply(x, e, s, t):
        for i in range(x.size):
            e[i] = _jit._exp_value(x[i])
            s[i] = _jit._sigmoid_value(x[i])
            t[i] = _jit._tanh_value(x[i])

    x = np.concatenate([np.linspace(-87, 88, 200001), np.linspace(-1, 1, 20001)]).astype(np.float32)
    e, s, t = (np.empty_like(x) for _ in range(3))
    apply(x, e, s, t)
    x64 = x.astype(np.float64)
    assert np.max(np.abs(e - np.exp(x64)) / np.exp(x64)) < 3e-7
    assert np.max(np.abs(s - 1 / (1 + np.exp(-x64)))) < 2e-7
    assert np.max(np.abs(t - np.tanh(x64))) < 2e-7


def test_the_checked_shape_signatures_are_bounded(monkeypatch):
    """A recurrent kernel remembers the input signatures it has checked, at most
    ``SHAPE_CACHE_MAX`` of them: a stream of ever new sequence lengths grew the set without end."""
    made: list = []
    real_init = rnn._Recurrent.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(rnn._Recurrent, "__init__", init)
    monkeypatch.setattr(rnn, "SHAPE_CACHE_MAX", 4)
    rng = np.random.default_rng(1)
    data, _ = _model("GRU", 3, hidden=6, inp=5, dirs=1, const_r=True, rng=rng)
    ref = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for seq in range(1, 11):
        feeds = {"X": rng.standard_normal((seq, 2, 5)).astype(np.float32)}
        for a, b in zip(got.run(None, feeds), ref.run(None, feeds)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert len(made) == 1 and 0 < len(made[0]._checked) <= 4


def _run_lstm(session, feeds):
    return session.run(None, feeds)


def test_onednn_recurrence_in_a_forked_child_takes_the_compiled_scan():
    """A session whose LSTM ran on oneDNN's primitive in the parent runs in a child forked from
    it (GNU OpenMP's threads do not survive fork: the parent's primitive would wait for them):
    the child takes the compiled or numpy scan, with the parent's values within tolerance, and
    lives."""
    if not _onednn.available():
        pytest.skip("oneDNN (onednn-cpu-gomp) is not installed")
    from parallel_runs import in_forked_child

    rng = np.random.default_rng(8)
    data = _recurrent_model("LSTM", "forward", hidden=160, inp=7, attrs={}, peepholes=False, rng=rng)
    feeds = {"X": rng.standard_normal((6, 1, 7)).astype(np.float32), "lens": np.full(1, 6, np.int32),
             "H0": np.zeros((1, 1, 160), np.float32), "C0": np.zeros((1, 1, 160), np.float32)}
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2  # (hidden 160: the primitive's two threads)
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    session.run(None, feeds)
    want = session.run(None, feeds)  # (the shape's second run: the primitive's)
    for a, b in zip(in_forked_child(_run_lstm, session, feeds, timeout=60), want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_onednn_recurrence_packs_its_weights_once_for_every_sequence_length(monkeypatch):
    """A node's primitive for a new sequence length (an OCR line of another width) takes the
    weights its primitive for the first length packed into oneDNN's layouts
    (``_onednn.PackedConstants``): repacking them made a new length's first run of a
    bidirectional hidden-512 LSTM cost 7-22 ms more instead of about 2.5."""
    made, packs = _primitives_made(monkeypatch, 3), []
    real_pack = _onednn._Primitive._pack
    monkeypatch.setattr(_onednn._Primitive, "_pack", lambda self, *a: packs.append(1) or real_pack(self, *a))
    rng = np.random.default_rng(10)
    data = _recurrent_model("LSTM", "bidirectional", hidden=16, inp=5, attrs={}, peepholes=True, rng=rng)
    ref = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    counts = []
    for seq in (6, 9, 4):
        feeds = {"X": rng.standard_normal((seq, 2, 5)).astype(np.float32), "lens": np.full(2, seq, np.int32),
                 "H0": np.zeros((2, 2, 16), np.float32), "C0": np.zeros((2, 2, 16), np.float32)}
        for _ in range(2):  # (the second run makes the shape's primitive)
            for a, b in zip(got.run(None, feeds), ref.run(None, feeds)):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
        counts.append(len(packs))
    assert len(made) == 3
    assert counts[0] == 4 and counts[1] == counts[2] == 4  # W, R, bias, peepholes: packed once


def test_onednn_recurrence_is_not_made_for_a_shape_seen_once(monkeypatch):
    """A shape's first run takes the compiled scan; only a shape seen again gets a primitive (a
    speech model fed ever new lengths would pay a primitive's making, 2.5-20 ms at hidden 512,
    at every run)."""
    made = _primitives_made(monkeypatch, 3)
    rng = np.random.default_rng(11)
    data = _recurrent_model("GRU", "forward", hidden=16, inp=5, attrs={}, peepholes=False, rng=rng)
    ref = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for seq in (3, 4, 5, 6, 4):
        feeds = {"X": rng.standard_normal((seq, 1, 5)).astype(np.float32), "lens": np.full(1, seq, np.int32),
                 "H0": np.zeros((1, 1, 16), np.float32)}
        for a, b in zip(got.run(None, feeds), ref.run(None, feeds)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert made == [(4, 1, 5)]  # the one length seen twice


@pytest.mark.parametrize("seq", [1, 3], ids=["single_step", "scan"])
def test_lstm_gates_far_below_zero_give_no_subnormal_state(seq):
    """An input gate's logistic under float32's smallest normal value is 0 in the compiled cells
    (``_jit._SIGMOID_FLOOR``), as onnxruntime's LSTM gives it: computed, it was subnormal, and so
    was the cell state made from it, whose arithmetic runs in microcode (silero-vad's LSTM step
    2.5x slower in the model). Gates just above the floor keep their (normal) values."""
    pytest.importorskip("numba", reason="numba (optional) is not installed")
    hidden, inp = 8, 4
    w = np.zeros((1, 4 * hidden, inp), np.float32)
    r = np.zeros((1, 4 * hidden, hidden), np.float32)
    b = np.zeros((1, 8 * hidden), np.float32)
    b[0, :hidden] = np.linspace(-100, -80, hidden)  # the input gate: e^-100 to e^-80
    b[0, hidden:2 * hidden] = 5.0  # the output gate open
    b[0, 3 * hidden:4 * hidden] = 1.0  # the cell candidate tanh(1)
    node = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y", "Y_h", "Y_c"], hidden_size=hidden)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [seq, 1, inp])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("Y", "Y_h", "Y_c")],
                              [onnx.numpy_helper.from_array(v, n) for v, n in ((w, "W"), (r, "R"), (b, "B"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    data, feeds = model.SerializeToString(), {"X": np.zeros((seq, 1, inp), np.float32)}
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    tiny = np.finfo(np.float32).tiny
    for g, w_ in zip(got, want):
        assert not ((g != 0) & (np.abs(g) < tiny)).any(), g
        np.testing.assert_allclose(g, w_, rtol=0, atol=1e-30)
    c = got[2].ravel()
    assert (c[:5] == 0).all() and (c[5:] > 0).all()  # e^-88.6 and below: 0; e^-85.7 and above: kept
