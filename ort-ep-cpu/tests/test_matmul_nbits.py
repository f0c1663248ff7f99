"""com.microsoft MatMulNBits against onnxruntime's kernel: weights from onnxruntime's own
MatMulNBits quantizer and random packed codes, 2/4/8 bits, block sizes 16-128, K not a multiple
of the block, packed uint8 / float / default zero points, bias, batched A. Tolerance: relative
1e-5 of the output's range (float32 sums in another order; accuracy_level 0 is float compute)."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort
from ort_ep_cpu.kernels import matmul_nbits

MS = "com.microsoft"


def _model(k, n, bits, block, zero_points: str, bias: bool, seed=0, a_shape=(3, 5), accuracy_level=0):
    rng = np.random.default_rng(seed)
    blocks = -(-k // block)
    b = rng.integers(0, 256, (n, blocks, block * bits // 8)).astype(np.uint8)
    scales = rng.uniform(0.01, 0.05, n * blocks).astype(np.float32)
    inits = [numpy_helper.from_array(b, "b"), numpy_helper.from_array(scales, "s")]
    inputs = ["a", "b", "s"]
    if zero_points == "packed":
        per_row = -(-blocks * bits // 8)
        inits.append(numpy_helper.from_array(rng.integers(0, 256, n * per_row).astype(np.uint8), "zp"))
        inputs.append("zp")
    elif zero_points == "float":
        inits.append(numpy_helper.from_array(rng.uniform(0, 2 ** bits - 1, n * blocks).astype(np.float32), "zp"))
        inputs.append("zp")
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "bias"))
        inputs += [""] * (5 - len(inputs)) + ["bias"]
    node = helper.make_node("MatMulNBits", inputs, ["y"], domain=MS, K=k, N=n, bits=bits, block_size=block,
                            accuracy_level=accuracy_level)
    graph = helper.make_graph([node], "nbits", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [*a_shape, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*a_shape, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    return model.SerializeToString(), rng.standard_normal((*a_shape, k)).astype(np.float32)


def _check(data, a):
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * float(np.abs(want).max()))


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("block", [16, 32, 128])
@pytest.mark.parametrize("zero_points", ["default", "packed", "float"])
def test_matmul_nbits_forms_match_onnxruntime(bits, block, zero_points):
    if bits == 8 and zero_points == "float":
        data, _ = _model(96, 40, bits, block, zero_points, bias=False)
        with pytest.raises(ort.OrtError, match="float zero points"):  # onnxruntime declines it too
            ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        return
    _check(*_model(96, 40, bits, block, zero_points, bias=False, seed=bits + block))


@pytest.mark.parametrize("k", [100, 33])
def test_k_not_a_multiple_of_the_block_and_bias(k):
    _check(*_model(k, 24, 4, 32, "packed", bias=True, seed=k, a_shape=(2, 1)))


def test_weights_are_taken_a_slab_at_a_time(monkeypatch):
    # a slab smaller than the matrix: several slabs, the same answer
    monkeypatch.setattr(matmul_nbits, "_SLAB_BYTES", 40 * 32 * 4 * 2)  # two blocks per slab
    _check(*_model(256, 40, 4, 32, "packed", bias=True, seed=5))


@pytest.mark.parametrize("compiled", [True, False], ids=["numba", "numpy"])
@pytest.mark.parametrize("rows", [1, matmul_nbits._FEW_ROWS, matmul_nbits._FEW_ROWS + 1, 9])
def test_both_4bit_paths_every_row_count(monkeypatch, compiled, rows):
    # rows <= _FEW_ROWS take the compiled dot loop over packed bytes, more rows the compiled
    # slab dequantization + BLAS (5 blocks, 2 per slab: a partial last slab), or numpy's path
    from ort_ep_cpu.kernels import _jit

    if compiled and matmul_nbits._packed4_kernels() is None:
        pytest.skip("numba is not installed")
    monkeypatch.setattr(_jit, "USE", compiled)
    monkeypatch.setattr(matmul_nbits, "_SLAB_BYTES", 24 * 32 * 4 * 2)
    _check(*_model(150, 24, 4, 32, "packed", bias=True, seed=rows, a_shape=(rows,)))


def test_onnxruntime_quantizer_output_matches():
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((128, 64)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "w"], ["y"])], "mm",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [4, 128])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])], [w])
    for symmetric in (True, False):
        quantizer = MatMulNBitsQuantizer(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                                         block_size=32, is_symmetric=symmetric)
        quantizer.process()
        model = quantizer.model.model
        assert [n.op_type for n in model.graph.node] == ["MatMulNBits"]
        _check(model.SerializeToString(), rng.standard_normal((4, 128)).astype(np.float32))


def test_wrong_sizes_are_a_clear_error():
    data, _ = _model(96, 40, 4, 32, "default", bias=False)
    import onnx

    model = onnx.load_from_string(data)
    for attr in model.graph.node[0].attribute:
        if attr.name == "N":
            attr.i = 41
    with pytest.raises(ort.OrtError, match="B has"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("a_shape", [(1,), (3, 5)], ids=["one-row", "rows"])
def test_accuracy_level_4_is_onnxruntimes_int8_compute(bits, a_shape):
    """accuracy_level=4 (what LLM exporters set): onnxruntime quantizes A to int8 per block;
    the float compute is 5e-3 of the range away from its answer, the emulation 1e-7."""
    _check(*_model(100, 48, bits, 32, "packed", bias=True, seed=3, a_shape=a_shape, accuracy_level=4))


@pytest.mark.parametrize("rows", [1, 9])  # (the dot loop, and the slabs' dequantization)
def test_4bit_loops_take_the_sessions_threads(monkeypatch, rows):
    """The compiled 4-bit loops' prange runs on the session's threads: numba's pool ran every
    region on all its threads whatever intra_op_num_threads said (a 4-bit MiniLM at one thread
    beside a busy core: 2-13x onnxruntime's time, 1.6x so)."""
    if matmul_nbits._packed4_kernels() is None:
        pytest.skip("numba is not installed")
    import numba

    asked = []
    real = numba.set_num_threads
    monkeypatch.setattr(numba, "set_num_threads", lambda n: (asked.append(n), real(n))[1])
    data, a = _model(150, 24, 4, 32, "packed", bias=True, seed=3, a_shape=(rows,))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    got = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * float(np.abs(want).max()))
    assert asked[0::2] == [1] * (len(asked) // 2)  # the loops on one thread, then numba's count given back
    assert asked[1::2] == [numba.get_num_threads()] * (len(asked) // 2) and asked
