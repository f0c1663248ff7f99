"""Empty tensors (a batch of 0, a sequence of 0, an empty axis) through the ops that failed on
them, against onnxruntime's outputs: a table-structure model's Softmax over no detected cells
raised "zero-size array to reduction operation maximum" where onnxruntime returns (1, 0, 4).
(onnxruntime itself ends the process on an LSTM of batch 0 and a GRU of sequence 0: those give
the empty outputs the other recurrent cases give, checked by shape.)"""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort


def _model(op: str, x_shape, attrs: dict, weights: dict, outputs: int = 1, opset: int = 17) -> bytes:
    inputs = ["x", *weights]
    graph = helper.make_graph(
        [helper.make_node(op, inputs, [f"y{i}" for i in range(outputs)], **attrs)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None) for i in range(outputs)],
        [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


_rng = np.random.default_rng(0)
_W = {"w": _rng.standard_normal((1, 12, 2)).astype(np.float32), "r": _rng.standard_normal((1, 12, 3)).astype(np.float32)}
CASES = {
    "Softmax (2, 0, 0)": (_model("Softmax", (2, 0, 0), {}, {}), (2, 0, 0), True),
    "Softmax axis 1 (1, 0, 4)": (_model("Softmax", (1, 0, 4), {"axis": 1}, {}), (1, 0, 4), True),
    "LogSoftmax opset 11 (2, 0, 3)": (_model("LogSoftmax", (2, 0, 3), {"axis": 1}, {}, opset=11), (2, 0, 3), True),
    "Hardmax (0, 5)": (_model("Hardmax", (0, 5), {}, {}), (0, 5), True),
    "ConvTranspose batch 0": (_model("ConvTranspose", (0, 2, 5, 5), {"strides": [2, 2]},
                                     {"w": _rng.standard_normal((2, 3, 3, 3)).astype(np.float32)}), (0, 2, 5, 5), True),
    "InstanceNormalization batch 0": (_model("InstanceNormalization", (0, 2, 5, 5), {},
                                             {"s": np.ones(2, np.float32), "b": np.zeros(2, np.float32)}), (0, 2, 5, 5), True),
    "LSTM sequence 0": (_model("LSTM", (0, 1, 2), {"hidden_size": 3}, {"w": _W["w"], "r": _W["r"]}, 2), (0, 1, 2), True),
    "RNN sequence 0": (_model("RNN", (0, 1, 2), {"hidden_size": 3},
                              {"w": _W["w"][:, :3], "r": _W["r"][:, :3]}, 2), (0, 1, 2), True),
    "GRU sequence 0": (_model("GRU", (0, 1, 2), {"hidden_size": 3},
                              {"w": _W["w"][:, :9], "r": _W["r"][:, :9]}, 2), (0, 1, 2), False),
    "LSTM batch 0": (_model("LSTM", (4, 0, 2), {"hidden_size": 3}, {"w": _W["w"], "r": _W["r"]}, 2), (4, 0, 2), False),
    # (found by a scan of 60 ops on a batch of 0 in session 35: reshape(0, -1) cannot work out -1)
    "Flatten batch 0": (_model("Flatten", (0, 3, 2), {"axis": 1}, {}), (0, 3, 2), True),
    "GridSample batch 0": (_model("GridSample", (0, 1, 4, 4), {}, {"g": np.zeros((0, 2, 2, 2), np.float32)}, opset=20),
                           (0, 1, 4, 4), True),
}
# what onnxruntime would give where it ends the process instead
SHAPES = {"GRU sequence 0": [(0, 1, 1, 3), (1, 1, 3)], "LSTM batch 0": [(4, 1, 0, 3), (1, 0, 3)]}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("level", [ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL])
def test_empty_inputs_give_onnxruntimes_empty_outputs(case, level):
    data, x_shape, reference = CASES[case]
    feeds = {"x": np.zeros(x_shape, np.float32)}
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    got = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"]).run(None, feeds)
    if not reference:
        assert [g.shape for g in got] == SHAPES[case]
        assert all(not g.size or not g.any() for g in got)  # a zero initial state, no steps
        return
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def _ms_case(op: str, inputs: list[str], feeds: dict, consts: dict, **attrs) -> tuple[bytes, dict]:
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["y"], domain="com.microsoft", **attrs)], "g",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), None) for k, v in feeds.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model.SerializeToString(), feeds


_EMPTY = np.zeros((1, 0, 16), np.float32)
_ANGLES = _rng.random((8, 4))
MS_CASES = {
    "Attention S=0": _ms_case("Attention", ["x", "w", "b"], {"x": _EMPTY},
                              {"w": _rng.standard_normal((16, 48)).astype(np.float32), "b": np.zeros(48, np.float32)},
                              num_heads=2),
    "MultiHeadAttention S=0": _ms_case("MultiHeadAttention", ["q", "k", "v"],
                                       {"q": _EMPTY, "k": np.ones((1, 3, 16), np.float32), "v": np.ones((1, 3, 16), np.float32)},
                                       {}, num_heads=2),
    "RotaryEmbedding S=0": _ms_case("RotaryEmbedding", ["x", "pid", "cos", "sin"], {"x": _EMPTY, "pid": np.array([0], np.int64)},
                                    {"cos": np.cos(_ANGLES).astype(np.float32), "sin": np.sin(_ANGLES).astype(np.float32)},
                                    num_heads=2),
    "MatMulNBits M=0": _ms_case("MatMulNBits", ["a", "b", "s"], {"a": _EMPTY},
                                {"b": np.full((4, 1, 8), 0x88, np.uint8), "s": np.ones(4, np.float32)},
                                K=16, N=4, bits=4, block_size=16),
}


@pytest.mark.parametrize("case", MS_CASES)
def test_contrib_ops_of_an_empty_sequence_give_onnxruntimes_empty_outputs(case):
    """A sequence of 0 through Attention, MultiHeadAttention, RotaryEmbedding and MatMulNBits:
    onnxruntime's empty outputs (they raised "cannot reshape array of size 0 ..." and
    "zero-size array to reduction operation")."""
    data, feeds = MS_CASES[case]
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
