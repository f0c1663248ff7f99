"""The compiled float32 product of constant weights (``_jit.float_product``: register blocks of
six rows by sixteen columns, ``_vector_ir.fma_block``), which ``nn._ConstantProduct`` takes for
more than ``COMPILED_PRODUCT_ROWS`` rows. Tolerance: relative 1e-5 of the largest output (float32
sums in another order than float64's and onnxruntime's)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from compiled_loops import use_compiled
from onnx import TensorProto, helper

import ort_core as ort
from ort_ep_cpu.kernels import _jit, nn


def _close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * max(float(np.abs(want).max()), 1.0))


@pytest.mark.parametrize("m", [1, 5, 6, 7, 11, 12, 13, 30])  # every count of rows the six-row block leaves
@pytest.mark.parametrize("k,n", [(1, 1), (37, 19), (128, 48), (4097, 37)])  # (4097: rows in blocks of 12)
@pytest.mark.parametrize("parts", [1, 2, 3])
def test_every_row_and_column_remainder_against_float64(m, k, n, parts):
    pytest.importorskip("numba", reason="numba (optional) is not installed")
    loop = _jit.float_product(parts)
    if loop is None:
        pytest.skip("compiled loops switched off")
    rng = np.random.default_rng(m * 100 + k + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    for bias in (None, rng.standard_normal(n).astype(np.float32)):
        for weights in (b, np.asfortranarray(b), b[::-1][::-1]):  # packed from any strides
            bp, padded = nn.pack_float_panels(weights, bias)
            z = np.full((m, n), np.nan, np.float32)
            loop(a, bp, padded, z, parts)
            _close(z, a.astype(np.float64) @ b + (0 if bias is None else bias))


def _product_model(op: str, a_shape, k: int, n: int, attrs: dict, bias: bool) -> bytes:
    rng = np.random.default_rng(7)
    w = rng.standard_normal((n, k) if attrs.get("transB") else (k, n)).astype(np.float32)
    inits = [onnx.numpy_helper.from_array(w, "w")]
    inputs = ["a", "w"]
    if bias:
        inits.append(onnx.numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "c"))
        inputs.append("c")
    graph = helper.make_graph([helper.make_node(op, inputs, ["y"], **attrs)], "g",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("op,a_shape,k,n,attrs,bias,compiled", [
    ("MatMul", (9, 64), 64, 40, {}, False, True),
    ("MatMul", (2, 3, 50), 50, 17, {}, False, True),  # six rows over two leading dims
    ("Gemm", (33, 100), 100, 70, {"transB": 1}, True, True),  # B as stored (N, K), the bias added in the block
    ("Gemm", (64, 128), 128, 512, {}, True, True),  # split over the threads
    ("Gemm", (4, 100), 100, 70, {}, True, False),  # four rows: the row products
    ("Gemm", (8, 100), 100, 70, {"alpha": 0.5}, True, True),  # alpha folded into the packed B
    ("Gemm", (100, 8), 100, 70, {"transA": 1}, True, False),  # A transposed: numpy's product
])
@pytest.mark.parametrize("threads", [1, 2])
def test_products_of_constant_weights_take_the_compiled_product(monkeypatch, op, a_shape, k, n, attrs, bias, compiled,
                                                                 threads):
    monkeypatch.setattr(nn, "COMPILED_PRODUCT_MIN_MACS", 0)  # the forms at every size
    monkeypatch.setattr(nn, "COMPILED_PRODUCT_MAX_MACS_AVX512", 1 << 40)
    monkeypatch.setattr(nn, "SMALL_PRODUCT_MACS", 0)
    asked = use_compiled(monkeypatch, True, "float_product")
    data = _product_model(op, a_shape, k, n, attrs, bias)
    a = np.random.default_rng(8).standard_normal(a_shape).astype(np.float32)
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.graph_optimization_level = level
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        got = session.run(None, {"a": a})[0]
        assert got.shape == want.shape
        _close(got, want)
    assert bool(asked) == compiled
    macs = int(np.prod(a_shape)) * n
    assert all(call == ((threads,) if macs >= nn.ROW_SPLIT_MACS and threads > 1 else (1,)) for call in asked)


@pytest.mark.parametrize("op,rows,k,n,compiled", [
    ("MatMul", 64, 128, 128, True),  # 1M multiply-adds
    ("MatMul", 16, 128, 64, False),  # 131K: numpy's call is the quicker
    ("MatMul", 256, 256, 8, False),  # 524K, but B narrower than a panel
    ("MatMul", 256, 256, 16, True),
    ("Gemm", 8, 512, 10, True),  # with a bias, whatever the size (numpy's needs a pass more)
    ("Gemm", 8, 64, 64, True),
    ("Gemm", 128, 384, 384, True),  # 19M: oneDNN's where the CPU has AVX-512
    ("Gemm", 16, 336, 512, True),  # 2.8M of 16 rows: compiled there too
    ("MatMul", 25, 1024, 1024, True),  # 26M of 25 rows: oneDNN's there
])
def test_the_compiled_product_takes_large_products_of_a_panel_or_more(monkeypatch, op, rows, k, n, compiled):
    """As shipped: without a bias, ``COMPILED_PRODUCT_MIN_MACS`` multiply-adds and B at least
    one 16-column panel wide; others are numpy's (or oneDNN's) product. Where oneDNN is
    installed and the CPU has AVX-512, products from ``COMPILED_PRODUCT_MAX_MACS_AVX512``
    multiply-adds are oneDNN's (twice as fast there), those of fewer than ``FEW_ROWS_AVX512``
    rows from ``FEW_ROWS_MAX_MACS_AVX512``. Values: onnxruntime's."""
    from ort_ep_cpu.kernels import _onednn  # noqa: PLC0415

    macs = rows * k * n
    wider = macs >= nn.COMPILED_PRODUCT_MAX_MACS_AVX512 and (rows >= nn.FEW_ROWS_AVX512 or macs >= nn.FEW_ROWS_MAX_MACS_AVX512)
    if wider and _onednn.USE and _jit.has_avx512():
        compiled = False
    asked = use_compiled(monkeypatch, True, "float_product")
    data = _product_model(op, (rows, k), k, n, {}, op == "Gemm")
    a = np.random.default_rng(9).standard_normal((rows, k)).astype(np.float32)
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    _close(ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"a": a})[0], want)
    assert bool(asked) == compiled


@pytest.mark.parametrize("rows", [1, 8])
def test_nodes_multiplying_by_one_initializer_share_its_product(monkeypatch, rows):
    """An unrolled LSTM's steps each multiply by the same weights: one ``_ConstantProduct`` (B
    packed once, in each layout) serves every node with the same B, bias values and post-op;
    another bias or activation is another product. Each packed its own copy (20 steps of
    6.5 MB: 0.3 s of a captcha CRNN's first run). Values: onnxruntime's."""
    made = []
    real_init = nn._ConstantProduct.__init__
    monkeypatch.setattr(nn._ConstantProduct, "__init__", lambda self, *args: (made.append(1), real_init(self, *args))[1])
    rng = np.random.default_rng(5)
    w = onnx.numpy_helper.from_array(rng.standard_normal((96, 64)).astype(np.float32), "w")  # (N, K): transB
    b = onnx.numpy_helper.from_array(rng.standard_normal(96).astype(np.float32), "b")
    b2 = onnx.numpy_helper.from_array(rng.standard_normal(96).astype(np.float32), "b2")
    nodes = [helper.make_node("Gemm", [f"x{k}", "w", "b"], [f"y{k}"], transB=1) for k in range(3)]
    nodes.append(helper.make_node("Gemm", ["x3", "w", "b2"], ["y3"], transB=1))  # another bias
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(f"x{k}", TensorProto.FLOAT, [rows, 64])
                                            for k in range(4)],
                              [helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, None) for k in range(4)],
                              [w, b, b2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {f"x{k}": rng.standard_normal((rows, 64)).astype(np.float32) for k in range(4)}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, feeds)
    want = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, e in zip(got, want):
        _close(g, e)
    assert len(made) == 2  # one for the three nodes of bias b, one for b2
