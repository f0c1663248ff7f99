"""Slice/Squeeze/Unsqueeze with constant parameter inputs keep their index or output shape per
input shape: results match onnxruntime as the input shape changes between runs (exact: these
only move data), a bad input still fails on every run, and the same parameters fed at run
time (no constant) give the same results."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import ort_core as ort


def _model(op: str, params: dict[str, list[int]], const: bool, rank: int) -> bytes:
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None] * rank)]
    inits = []
    for name, v in params.items():
        if const:
            inits.append(onnx.numpy_helper.from_array(np.array(v, np.int64), name))
        else:
            inputs.append(helper.make_tensor_value_info(name, TensorProto.INT64, [len(v)]))
    added = {"Unsqueeze": len(params.get("axes", [])), "Squeeze": -len(params.get("axes", []))}.get(op, 0)
    out_rank = rank + added
    graph = helper.make_graph([helper.make_node(op, ["x", *params], ["y"])], "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * out_rank)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


CASES = [
    ("Slice", {"starts": [1, -3], "ends": [100, -1], "axes": [0, 2], "steps": [2, 1]}, 3, [(5, 2, 6), (4, 3, 4), (5, 2, 6)]),
    ("Slice", {"starts": [-1], "ends": [-100], "axes": [1], "steps": [-2]}, 2, [(3, 7), (2, 4)]),
    ("Unsqueeze", {"axes": [0, -1]}, 2, [(3, 4), (1, 5), (3, 4)]),
    ("Squeeze", {"axes": [1, -1]}, 4, [(2, 1, 3, 1), (4, 1, 1, 1)]),
]


@pytest.mark.parametrize("op,params,rank,shapes", CASES)
@pytest.mark.parametrize("const", [True, False])
def test_matches_onnxruntime_as_shapes_change(op, params, rank, shapes, const):
    data = _model(op, params, const, rank)
    ref = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    extra = {} if const else {k: np.array(v, np.int64) for k, v in params.items()}
    for shape in shapes:
        feeds = {"x": rng.standard_normal(shape).astype(np.float32), **extra}
        np.testing.assert_array_equal(got.run(None, feeds)[0], ref.run(None, feeds)[0])


def test_squeeze_of_a_long_axis_fails_on_every_run():
    got = ort.InferenceSession(_model("Squeeze", {"axes": [1]}, True, 3), providers=["CPUExecutionProvider"])
    assert got.run(None, {"x": np.zeros((2, 1, 3), np.float32)})[0].shape == (2, 3)
    for _ in range(2):
        with pytest.raises(Exception, match="Squeeze"):
            got.run(None, {"x": np.zeros((2, 2, 3), np.float32)})


def _pad_model(mode: str, pads: list[int], axes: list[int] | None, value: float | None, const: bool, rank: int) -> bytes:
    params = {"pads": np.array(pads, np.int64)}
    if value is not None:
        params["value"] = np.array(value, np.float32)
    if axes is not None:
        params["axes"] = np.array(axes, np.int64)
    names = ["x", "pads", "value" if value is not None else "", "axes" if axes is not None else ""]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None] * rank)]
    inits = []
    for name, v in params.items():
        if const:
            inits.append(onnx.numpy_helper.from_array(v, name))
        else:
            elem = TensorProto.FLOAT if v.dtype == np.float32 else TensorProto.INT64
            inputs.append(helper.make_tensor_value_info(name, elem, list(v.shape)))
    node = helper.make_node("Pad", [n for n in names if n] if axes is None else names, ["y"], mode=mode)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * rank)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model.SerializeToString(), params


PAD_CASES = [
    ("reflect", [0, 32, 0, 32], None, None, 2, [(1, 512), (2, 100), (1, 512)]),  # silero-vad's STFT padding
    ("constant", [1, -1, 2, 0], None, 1.5, 2, [(3, 4), (2, 6)]),  # negative pads crop
    ("edge", [2, 3], [-1], None, 3, [(2, 3, 4), (1, 1, 2)]),
    ("wrap", [1, 0, 0, 2], [0, 2], None, 3, [(3, 2, 4), (4, 1, 3)]),
    ("reflect", [2, 2], [1], None, 2, [(2, 3), (4, 5)]),  # a whole reflection (onnxruntime allows no more)
    ("constant", [1, 1], [0], None, 2, [(300, 200)]),  # larger than PAD_GATHER_MAX: slices
]


@pytest.mark.parametrize("mode,pads,axes,value,rank,shapes", PAD_CASES)
@pytest.mark.parametrize("const", [True, False])
def test_pad_matches_onnxruntime(mode, pads, axes, value, rank, shapes, const):
    """Pad with constant pads is one gather by an index kept per input shape (small inputs)."""
    data, params = _pad_model(mode, pads, axes, value, const, rank)
    ref = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    extra = {} if const else dict(params)
    for shape in shapes:
        feeds = {"x": rng.standard_normal(shape).astype(np.float32), **extra}
        np.testing.assert_array_equal(got.run(None, feeds)[0], ref.run(None, feeds)[0])


def test_pads_computed_each_run_are_remembered_by_value(monkeypatch):
    """Pads that arrive as a new array each run (computed in the graph: silero-vad v4's STFT
    padding) make the gather index once per shape and values: its making took 30 us a run.
    Other values still get their own index."""
    from ort_ep_cpu.kernels import shape as shape_kernels

    made: list[tuple] = []
    real = shape_kernels._pad_index
    monkeypatch.setattr(shape_kernels, "_pad_index", lambda shape, *a: made.append(shape) or real(shape, *a))
    data, _ = _pad_model("reflect", [0, 0, 0, 96], None, None, False, 2)
    ref = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(2).standard_normal((1, 480)).astype(np.float32)
    for pads in ([0, 0, 0, 96], [0, 0, 0, 96], [0, 96, 0, 96], [0, 0, 0, 96]):
        feeds = {"x": x, "pads": np.array(pads, np.int64)}  # a new array each run
        np.testing.assert_array_equal(got.run(None, feeds)[0], ref.run(None, feeds)[0])
    assert made == [(1, 480), (1, 480)]  # once per distinct pads


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2"])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("shape", [(1, 1), (3, 1, 2), (2, 4, 2)])
def test_reduce_over_length_one_axes(op, keepdims, shape):
    """Reducing axes of length 1 is a reshape for Mean/Sum/Max/Min/Prod (ReduceL2 still
    computes); int32 and float32 match onnxruntime exactly (rtol 1e-6 for L2)."""
    for elem, dtype in ((TensorProto.FLOAT, np.float32), (TensorProto.INT32, np.int32)):
        if op == "ReduceL2" and dtype == np.int32:
            continue
        axes = onnx.numpy_helper.from_array(np.array([1, -1], np.int64), "axes")
        node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)
        out_rank = len(shape) if keepdims else len(shape) - 2
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, [None] * len(shape))],
                                  [helper.make_tensor_value_info("y", elem, [None] * out_rank)], [axes])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        model.ir_version = 8
        data = model.SerializeToString()
        x = (np.random.default_rng(2).standard_normal(shape) * 10).astype(dtype)
        want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        got = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        for _ in range(2):
            np.testing.assert_allclose(got.run(None, {"x": x})[0], want, rtol=1e-6)
