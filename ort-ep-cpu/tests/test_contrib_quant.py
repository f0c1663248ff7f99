"""onnxruntime's com.microsoft quantization ops against onnxruntime's own kernels, one node at a
time over the attribute and input forms its tools emit. Tolerance: integer outputs equal, or one
unit apart on a fraction of elements (rounding ties of float32 scale products, MLAS's vector
order); float outputs relative 1e-5 of their range."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import helper, numpy_helper

import ort_core as ort
from ort_core.testing import exact_reference

MS = "com.microsoft"
U8, I8, F = np.uint8, np.int8, np.float32


def _model(op, inputs, consts, feeds, out, **attrs):
    """A one-node model: ``inputs`` names in order ('' for an omitted one), ``consts`` are
    initializers, ``feeds`` graph inputs (name -> array), ``out`` the output dtype(s)."""
    out = out if isinstance(out, list) else [out]
    n_out = len(out)
    node = helper.make_node(op, inputs, [f"y{k}" for k in range(n_out)], domain=MS, **attrs)
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in feeds.items()]
    outs = [helper.make_tensor_value_info(f"y{k}", helper.np_dtype_to_tensor_dtype(np.dtype(t)), None)
            for k, t in enumerate(out)]
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items()]
    graph = helper.make_graph([node], op, ins, outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]).SerializeToString()


def _run_both(model, feeds):
    want = exact_reference.session(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    return got, want


def _assert_quantized(got, want, off_by_one=0.02):
    assert got.dtype == want.dtype and got.shape == want.shape
    diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
    assert diff.max() <= 1, f"max difference {diff.max()} units"
    assert (diff > 0).sum() <= max(1, off_by_one * diff.size), f"{(diff > 0).mean():.1%} of elements one unit off"


def _assert_float(got, want, rel=1e-5):
    assert got.dtype == want.dtype and got.shape == want.shape
    scale = max(float(np.abs(want).max()), 1e-30)
    np.testing.assert_allclose(got, want, rtol=0, atol=rel * scale)


def _q(rng, shape, dtype=U8):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dtype", [U8, I8])
@pytest.mark.parametrize("shapes", [((2, 3, 8, 8), (2, 3, 8, 8)), ((2, 16, 4), (16, 1)), ((4, 5), ())])
def test_qlinear_binary(op, dtype, shapes):
    rng = np.random.default_rng(len(op) + len(shapes[1]))
    a, b = _q(rng, shapes[0], dtype), _q(rng, shapes[1], dtype)
    zp = np.array(3 if dtype == U8 else -2, dtype)
    consts = {"sa": np.array(0.02, F), "za": zp, "sb": np.array(0.05, F), "zb": np.array(7, dtype),
              "sc": np.array(0.09 if op == "QLinearAdd" else 0.4, F), "zc": np.array(5, dtype)}
    model = _model(op, ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"], consts, {"a": a, "b": b}, dtype)
    got, want = _run_both(model, {"a": a, "b": b})
    _assert_quantized(got[0], want[0])


@pytest.mark.parametrize("op", ["QLinearSigmoid", "QLinearLeakyRelu"])
@pytest.mark.parametrize("dtype", [U8, I8])
def test_qlinear_unary(op, dtype):
    rng = np.random.default_rng(1)
    x = _q(rng, (3, 4, 7, 7), dtype)
    consts = {"sx": np.array(0.05, F), "zx": np.array(128 if dtype == U8 else 0, dtype),
              "sy": np.array(1 / 256 if op == "QLinearSigmoid" else 0.04, F), "zy": np.array(0 if dtype == U8 else -128, dtype)}
    attrs = {"alpha": 0.1} if op == "QLinearLeakyRelu" else {}
    model = _model(op, ["x", "sx", "zx", "sy", "zy"], consts, {"x": x}, dtype, **attrs)
    got, want = _run_both(model, {"x": x})
    _assert_quantized(got[0], want[0], off_by_one=0.0)


@pytest.mark.parametrize("dtype", [U8, I8])
@pytest.mark.parametrize("shape, attrs", [((4, 12), {"opset": 13}), ((2, 3, 50), {"axis": 1, "opset": 13}),
                                          ((2, 3, 7), {"axis": 1, "opset": 12}), ((3, 128), {"axis": -1, "opset": 13})])
@pytest.mark.parametrize("x_scale", [0.05, 0.2])
@pytest.mark.parametrize("y_scale, y_zero", [(1 / 256, "low"), (0.01, "mid")])
def test_qlinear_softmax_equals_onnxruntime(dtype, shape, attrs, x_scale, y_scale, y_zero):
    """quantize_static's QOperator format makes one of every Softmax (BERT, ViT); equal to
    onnxruntime's integers, rows dominated by one code (saturation) among them."""
    rng = np.random.default_rng(len(shape) + int(x_scale * 100))
    x = _q(rng, shape, dtype)
    zero = {"low": {U8: 0, I8: -128}, "mid": {U8: 128, I8: 0}}[y_zero][dtype]
    consts = {"sx": np.array(x_scale, F), "zx": np.array(0, dtype), "sy": np.array(y_scale, F),
              "zy": np.array(zero, dtype)}
    model = _model("QLinearSoftmax", ["x", "sx", "zx", "sy", "zy"], consts, {"x": x}, dtype, **attrs)
    got, want = _run_both(model, {"x": x})
    _assert_quantized(got[0], want[0], off_by_one=0.0)
    assert np.array_equal(got[0], want[0])


@pytest.mark.parametrize("axis", [1, -1])
def test_qlinear_concat(axis):
    rng = np.random.default_rng(2)
    xs = [_q(rng, (2, 3, 4)), _q(rng, (2, 3, 4)), _q(rng, (2, 3, 4))]
    consts = {"sy": np.array(0.1, F), "zy": np.array(10, U8), "s0": np.array(0.1, F), "z0": np.array(10, U8),
              "s1": np.array(0.03, F), "z1": np.array(128, U8), "s2": np.array(0.2, F), "z2": np.array(0, U8)}
    feeds = {f"x{k}": x for k, x in enumerate(xs)}
    model = _model("QLinearConcat", ["sy", "zy", "x0", "s0", "z0", "x1", "s1", "z1", "x2", "s2", "z2"], consts, feeds, U8,
                   axis=axis)
    got, want = _run_both(model, feeds)
    _assert_quantized(got[0], want[0], off_by_one=0.0)


@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("dtype", [U8, I8])
def test_qlinear_global_average_pool(channels_last, dtype):
    rng = np.random.default_rng(3)
    x = _q(rng, (2, 6, 6, 16) if channels_last else (2, 16, 6, 6), dtype)
    consts = {"sx": np.array(0.07, F), "zx": np.array(4, dtype), "sy": np.array(0.05, F), "zy": np.array(-3 if dtype == I8 else 3, dtype)}
    model = _model("QLinearGlobalAveragePool", ["x", "sx", "zx", "sy", "zy"], consts, {"x": x}, dtype, channels_last=channels_last)
    got, want = _run_both(model, {"x": x})
    _assert_quantized(got[0], want[0])


@pytest.mark.parametrize("attrs", [
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1),
    dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", channels_last=1),
], ids=["pads", "count-pad", "ceil", "channels-last"])
def test_qlinear_average_pool(attrs):
    rng = np.random.default_rng(4)
    x = _q(rng, (2, 7, 7, 8) if attrs.get("channels_last") else (2, 8, 7, 7))
    consts = {"sx": np.array(0.07, F), "zx": np.array(4, U8), "sy": np.array(0.05, F), "zy": np.array(3, U8)}
    model = _model("QLinearAveragePool", ["x", "sx", "zx", "sy", "zy"], consts, {"x": x}, U8, **attrs)
    got, want = _run_both(model, {"x": x})
    _assert_quantized(got[0], want[0], off_by_one=0.05)  # float32 window sums in another order


@pytest.mark.parametrize("b_dtype", [U8, I8])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_dynamic_quantize_matmul(b_dtype, per_column, bias):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 5, 32)).astype(F)
    b = _q(rng, (32, 24), b_dtype)
    consts = {"b": b, "sb": (rng.uniform(0.01, 0.05, 24) if per_column else np.array(0.02)).astype(F),
              "zb": (_q(rng, (24,), b_dtype) // 8 if per_column else np.array(2, b_dtype)).astype(b_dtype)}
    inputs = ["a", "b", "sb", "zb"]
    if bias:
        consts["bias"] = rng.standard_normal(24).astype(F)
        inputs.append("bias")
    model = _model("DynamicQuantizeMatMul", inputs, consts, {"a": a}, F)
    got, want = _run_both(model, {"a": a})
    _assert_float(got[0], want[0])


def test_dynamic_quantize_matmul_takes_the_scaled_product(monkeypatch):
    """DynamicQuantizeMatMul quantizes A, then computes as MatMulIntegerToFloat does: the
    scaled product (oneDNN's product and one compiled pass, where they are there), not numpy's
    passes over an int32 product; the bits of onnxruntime's result at a T5 encoder's size."""
    from ort_ep_cpu.kernels import _integer

    calls: list[tuple] = []
    real = _integer.ConstantIntegerMatrix.scaled_times
    monkeypatch.setattr(_integer.ConstantIntegerMatrix, "scaled_times",
                        lambda self, a, *args, **kw: calls.append(a.shape) or real(self, a, *args, **kw))
    rng = np.random.default_rng(7)
    a = rng.standard_normal((1, 48, 512)).astype(F)
    consts = {"b": _q(rng, (512, 384), I8), "sb": rng.uniform(0.01, 0.05, 384).astype(F), "zb": np.zeros(384, I8)}
    model = _model("DynamicQuantizeMatMul", ["a", "b", "sb", "zb"], consts, {"a": a}, F)
    got, want = _run_both(model, {"a": a})
    np.testing.assert_array_equal(got[0], want[0])
    assert calls == [(48, 512)]


@pytest.mark.parametrize("a_dtype,b_dtype", [(U8, I8), (U8, U8), (I8, I8)])
@pytest.mark.parametrize("zero_points", [False, True])
@pytest.mark.parametrize("size", ["small", "oneDNN's"])
def test_matmul_integer_to_float(a_dtype, b_dtype, zero_points, size):
    """Also at a quantized T5 encoder's size (48 x 512 x 384), where oneDNN computes the
    product and one compiled pass the zero-point terms and the scale: the bits of
    float32((A - za) @ (B - zb)) * float32(sa * sb) + bias, as onnxruntime's."""
    rng = np.random.default_rng(6)
    (m, k, n) = (4, 16, 12) if size == "small" else (48, 512, 384)
    a, b = _q(rng, (2, m, k), a_dtype), _q(rng, (k, n), b_dtype)
    consts = {"b": b, "sa": np.array(0.03, F), "sb": rng.uniform(0.01, 0.05, n).astype(F)}
    inputs = ["a", "b", "sa", "sb"]
    za, zb, bias = np.array(0, a_dtype), np.zeros(n, b_dtype), np.zeros(n, F)
    if zero_points:
        za, zb, bias = np.array(5, a_dtype), (np.arange(n) % 5).astype(b_dtype), rng.standard_normal(n).astype(F)
        consts.update(za=za, zb=zb, bias=bias)
        inputs += ["za", "zb", "bias"]
    model = _model("MatMulIntegerToFloat", inputs, consts, {"a": a}, F)
    got, want = _run_both(model, {"a": a})
    _assert_float(got[0], want[0])
    acc = (a.astype(np.int64) - za.astype(np.int64)) @ (b.astype(np.int64) - zb.astype(np.int64))
    exact = acc.astype(F) * (consts["sa"] * consts["sb"]).astype(F)
    np.testing.assert_array_equal(got[0], exact + bias if zero_points else exact)


@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (0, 1), (1, 0)])
@pytest.mark.parametrize("output", ["float", "uint8"])
@pytest.mark.parametrize("bias", [False, True])
def test_qgemm(trans_a, trans_b, output, bias):
    rng = np.random.default_rng(7)
    m, k, n = 6, 20, 10
    a = _q(rng, (k, m) if trans_a else (m, k))
    b = _q(rng, (n, k) if trans_b else (k, n), I8)
    consts = {"sa": np.array(0.02, F), "za": np.array(100, U8), "b": b, "sb": rng.uniform(0.01, 0.03, n).astype(F),
              "zb": np.zeros(n, I8)}
    inputs = ["a", "sa", "za", "b", "sb", "zb"]
    inputs.append("c" if bias else "")
    if bias:
        consts["c"] = rng.integers(-500, 500, n).astype(np.int32)
    if output == "uint8":
        consts.update(sy=np.array(0.5, F), zy=np.array(128, U8))
        inputs += ["sy", "zy"]
    while inputs[-1] == "":
        inputs.pop()
    model = _model("QGemm", inputs, consts, {"a": a}, F if output == "float" else U8, alpha=1.0, transA=trans_a, transB=trans_b)
    got, want = _run_both(model, {"a": a})
    if output == "float":
        _assert_float(got[0], want[0])
    else:
        _assert_quantized(got[0], want[0])


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("w_dtype", [I8, U8])
@pytest.mark.parametrize("extras", [False, True])
@pytest.mark.parametrize("steps", ["compiled", "scan", "quad_scan", "numpy", "per_column_scale"])
def test_dynamic_quantize_lstm(direction, w_dtype, extras, steps, monkeypatch):
    """``steps``: the compiled step loop (one R scale per direction) on this machine's product
    (oneDNN's where the CPU has VNNI), the compiled scan with the packed product (oneDNN off;
    R's codes over their whole range), the scan with the byte product (oneDNN off, R - zr
    within +-60: no pair VPMADDUBSW could saturate on, as trained LSTM weights mostly are), the
    numpy steps, and the numpy steps that a per-column R scale takes even where the compiled
    loop is on."""
    from compiled_loops import use_compiled

    from ort_ep_cpu.kernels import _jit, _onednn

    if steps == "quad_scan" and not _jit.has_avx2():
        pytest.skip("the byte product needs AVX2")
    if steps in ("scan", "quad_scan"):
        monkeypatch.setattr(_onednn, "USE", False)
    if steps == "scan":  # whole-range codes go to the packed product where VPMADDUBSW is the block
        monkeypatch.setattr(_jit, "has_avx512_vnni", lambda: False)
    scans = use_compiled(monkeypatch, steps != "numpy", "quantized_lstm_scan")
    quad_scans = use_compiled(monkeypatch, steps != "numpy", "quantized_lstm_quad_scan")
    used = use_compiled(monkeypatch, steps != "numpy", "quantized_lstm_step")
    rng = np.random.default_rng(8)
    seq, batch, inp, hidden = 5, 3, 10, 8
    dirs = 2 if direction == "bidirectional" else 1
    x = rng.standard_normal((seq, batch, inp)).astype(F)
    r = _q(rng, (dirs, hidden, 4 * hidden), w_dtype)
    if steps == "quad_scan":
        r = (rng.integers(-60, 61, r.shape) + (0 if w_dtype == I8 else 128)).astype(w_dtype)
    consts = {"w": _q(rng, (dirs, inp, 4 * hidden), w_dtype), "r": r,
              "b": (0.1 * rng.standard_normal((dirs, 8 * hidden))).astype(F),
              "ws": np.full(dirs, 0.004, F), "wz": np.full(dirs, 2 if w_dtype == I8 else 128, w_dtype),
              "rs": rng.uniform(0.002, 0.006, (dirs, 4 * hidden) if steps == "per_column_scale" else dirs).astype(F),
              "rz": np.full((dirs, 4 * hidden), 0 if w_dtype == I8 else 128, w_dtype)}
    feeds = {"x": x}
    inputs = ["x", "w", "r", "b", "", "", "", "", "ws", "wz", "rs", "rz"]
    if extras:  # sequence lengths, initial state, peepholes
        feeds["lens"] = np.array([5, 2, 4], np.int32)
        consts.update(h0=(0.5 * rng.standard_normal((dirs, batch, hidden))).astype(F),
                      c0=(0.5 * rng.standard_normal((dirs, batch, hidden))).astype(F),
                      p=(0.1 * rng.standard_normal((dirs, 3 * hidden))).astype(F))
        inputs[4:8] = ["lens", "h0", "c0", "p"]
    model = _model("DynamicQuantizeLSTM", inputs, consts, feeds, [F, F, F], hidden_size=hidden, direction=direction)
    # onnxruntime at one thread: at more it quantizes H per chunk of batch rows, one chunk per
    # thread, so its answer for a batch depends on its thread count
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    want = exact_reference.session(model, so, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, want):
        if not extras:
            # onnxruntime's bits: its gates' logistic and tanh are MLAS's rational approximations
            # (``_jit.mlas_logistic``), which both step paths take; with numpy's exact ones H's
            # requantization at each step flipped codes (4e-3 x range seen here, 0.106 of a
            # BiLSTM tagger's logits)
            np.testing.assert_array_equal(g, w)
        else:
            # not to the bit: the peepholes' sums in another order (3e-8), and rows past their
            # length change H's range where onnxruntime's requantization does not (a step of
            # H's scale, range/255, into the gates: up to 4e-3 x range seen)
            _assert_float(g, w, rel=6e-3)
    if steps != "numpy":  # asked for the compiled loop (which ran) only with one R scale
        assert bool(used) == (steps in ("compiled", "scan", "quad_scan"))
    if steps == "scan":
        assert scans and not quad_scans
    if steps == "quad_scan":
        assert quad_scans and not scans


@pytest.mark.parametrize("mask", ["none", "lengths", "2d"])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("unidirectional", [0, 1])
def test_qattention(mask, per_column, unidirectional):
    rng = np.random.default_rng(9)
    batch, seq, hidden, heads = 2, 6, 32, 4
    x = _q(rng, (batch, seq, hidden))
    consts = {"w": _q(rng, (hidden, 3 * hidden), I8), "b": (0.1 * rng.standard_normal(3 * hidden)).astype(F),
              "sx": np.array(0.02, F), "sw": (rng.uniform(0.002, 0.006, 3 * hidden) if per_column else np.array(0.004)).astype(F),
              "zx": np.array(128, U8), "zw": (np.zeros(3 * hidden) if per_column else np.array(0)).astype(I8)}
    feeds = {"x": x}
    inputs = ["x", "w", "b", "sx", "sw", "", "zx", "zw"]
    if mask == "lengths":
        feeds["m"] = np.array([6, 3], np.int32)
        inputs[5] = "m"
    elif mask == "2d":
        feeds["m"] = (np.arange(seq)[None, :] < np.array([[4], [6]])).astype(np.int32)
        inputs[5] = "m"
    model = _model("QAttention", inputs, consts, feeds, F, num_heads=heads, unidirectional=unidirectional)
    got, want = _run_both(model, feeds)
    _assert_float(got[0], want[0])


def test_dynamic_quantize_lstm_declines_per_column_zero_points():
    rng = np.random.default_rng(8)
    hidden, inp = 4, 3
    consts = {"w": _q(rng, (1, inp, 4 * hidden), U8), "r": _q(rng, (1, hidden, 4 * hidden), U8),
              "ws": np.full(1, 0.004, F), "wz": (np.arange(4 * hidden) % 3 + 120).astype(U8).reshape(1, -1),
              "rs": np.full(1, 0.004, F), "rz": np.full(1, 128, U8)}
    x = rng.standard_normal((2, 1, inp)).astype(F)
    model = _model("DynamicQuantizeLSTM", ["x", "w", "r", "", "", "", "", "", "ws", "wz", "rs", "rz"], consts,
                   {"x": x}, [F, F, F], hidden_size=hidden)
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    with pytest.raises(ort.OrtError, match="W_zero_point differs across columns"):
        session.run(None, {"x": x})


def test_dynamic_quantize_lstm_checks_its_zero_points_once(monkeypatch):
    """The one-zero-point check (np.unique over each direction's zero points) is made with the
    weights' matrices, once for the constant arrays, not at every run (60 us a run at hidden 512)."""
    from ort_ep_cpu.kernels import contrib_quant

    checks = []
    real = contrib_quant._check_one_zero_point
    monkeypatch.setattr(contrib_quant, "_check_one_zero_point", lambda *args: (checks.append(args[1]), real(*args))[1])
    rng = np.random.default_rng(8)
    hidden, inp = 4, 3
    consts = {"w": _q(rng, (1, inp, 4 * hidden), U8), "r": _q(rng, (1, hidden, 4 * hidden), U8),
              "ws": np.full(1, 0.004, F), "wz": np.full((1, 4 * hidden), 120, U8), "rs": np.full(1, 0.004, F),
              "rz": np.full(1, 128, U8)}
    x = rng.standard_normal((2, 1, inp)).astype(F)
    model = _model("DynamicQuantizeLSTM", ["x", "w", "r", "", "", "", "", "", "ws", "wz", "rs", "rz"], consts,
                   {"x": x}, [F, F, F], hidden_size=hidden)
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    first = session.run(None, {"x": x})
    for _ in range(3):
        np.testing.assert_array_equal(session.run(None, {"x": x})[0], first[0])
    assert sorted(checks) == ["R_zero_point", "W_zero_point"]


def test_qlinear_add_refuses_an_input_that_is_not_8_bit_codes():
    # quant_pre_process + QOperator wrote an int32 bias as a QLinearAdd's A: onnxruntime refuses
    # the model at load; ort-core ran it and made something up
    consts = {"a": np.array([1000, -2000, 300, 5], np.int32), "sa": np.array(0.001, F), "za": np.array(0, np.int32),
              "sb": np.array(0.05, F), "zb": np.array(128, U8), "sc": np.array(0.05, F), "zc": np.array(128, U8)}
    b = np.full((2, 4), 140, U8)
    model = _model("QLinearAdd", ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"], consts, {"b": b}, U8)
    with pytest.raises(Exception, match="QLinearAdd"):  # onnxruntime's schema check names the op
        onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    with pytest.raises(ort.NotImplemented, match=r"QLinearAdd.*input A \('a'\) is int32; it must be uint8 or int8"):
        ort.InferenceSession(model, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
@pytest.mark.parametrize("per_axis", [False, True])
def test_com_microsoft_quantize_and_dequantize_linear_are_onnxruntimes(dtype, per_axis):
    """com.microsoft QuantizeLinear / DequantizeLinear (onnxruntime.quantization's 16-bit QDQ and
    ``use_qdq_contrib_ops``): the standard ops' arithmetic, per tensor and per axis (axis 1).
    They had no CPU kernel ("no CPU kernel for com.microsoft::QuantizeLinear")."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((2, 3, 5)) * 40).astype(F)
    scale = np.array([0.5, 0.25, 0.75], F) if per_axis else np.array(0.5, F)
    info = np.iinfo(dtype)
    zero = np.array([3, 0, 5] if per_axis else 3, dtype) if info.min == 0 else np.array([-3, 0, 5] if per_axis else -3, dtype)
    q_model = _model("QuantizeLinear", ["x", "s", "z"], {"s": scale, "z": zero}, {"x": x}, dtype, axis=1)
    got, want = _run_both(q_model, {"x": x})
    assert got[0].dtype == want[0].dtype == dtype
    np.testing.assert_array_equal(got[0], want[0])
    dq_model = _model("DequantizeLinear", ["q", "s", "z"], {"s": scale, "z": zero}, {"q": want[0]}, F, axis=1)
    got, want = _run_both(dq_model, {"q": want[0]})
    np.testing.assert_array_equal(got[0], want[0])
