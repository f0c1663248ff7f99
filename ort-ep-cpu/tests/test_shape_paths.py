"""Pad (constant by a filled buffer, reflect/edge/wrap by slices, np.pad where a pad exceeds one
reflection or period) and Unsqueeze (a reshape) against onnxruntime (onnx.reference where
onnxruntime refuses the case): exact, since both are copies only."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import ort_core as ort


def _pad_model(mode: str, pads: list[int], axes: list[int] | None, value: float | None):
    inits = [onnx.numpy_helper.from_array(np.array(pads, np.int64), "pads")]
    inputs = ["x", "pads"]
    if value is not None or axes is not None:
        inputs.append("value" if value is not None else "")
        if value is not None:
            inits.append(onnx.numpy_helper.from_array(np.array(value, np.float32), "value"))
    if axes is not None:
        inputs.append("axes")
        inits.append(onnx.numpy_helper.from_array(np.array(axes, np.int64), "axes"))
    graph = helper.make_graph(
        [helper.make_node("Pad", inputs, ["y"], mode=mode)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None] * 3)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 3)], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    return model.SerializeToString()


PAD_CASES = [
    ("constant", [0, 1, 2, 1, 0, 3], None, 2.5),
    ("constant", [1, 0, 0, 0, 2, 1], None, None),
    ("constant", [0, -1, 2, 0, 1, -2], None, 0.0),  # negative pads crop
    ("reflect", [0, 2, 1, 0, 3, 2], None, None),  # end pad = size - 1: the slice stop at -1
    ("reflect", [0, 1, 0, 0, 1, 0], None, None),
    ("reflect", [0, 0, 6, 0, 0, 5], None, None),  # more than one reflection: np.pad (onnx.reference)
    ("edge", [1, 2, 0, 0, 3, 4], None, None),
    ("edge", [0, 0, 7, 0, 0, 1], None, None),
    ("wrap", [0, 2, 1, 0, 1, 3], None, None),
    ("wrap", [0, 0, 6, 0, 0, 0], None, None),  # more than one period: np.pad
    ("reflect", [2, 1], [-1], None),  # axes input
]


@pytest.mark.parametrize("mode,pads,axes,value", PAD_CASES)
def test_pad_matches_onnxruntime(mode, pads, axes, value):
    data = _pad_model(mode, pads, axes, value)
    x = np.arange(2 * 4 * 5, dtype=np.float32).reshape(2, 4, 5) * 0.5 - 3
    if mode == "reflect" and max(pads) > 4:  # onnxruntime refuses pads past one reflection
        from onnx.reference import ReferenceEvaluator

        want = ReferenceEvaluator(onnx.load_from_string(data)).run(None, {"x": x})[0]
    else:
        want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("axes", [[0], [-1], [3, 0], [1, -1, 2], [-5]])
def test_unsqueeze_matches_onnxruntime(axes):
    graph = helper.make_graph(
        [helper.make_node("Unsqueeze", ["x", "axes"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * (2 + len(axes)))],
        [onnx.numpy_helper.from_array(np.array(axes, np.int64), "axes")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    data = model.SerializeToString()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    if axes == [-5]:  # out of range for the rank-3 result
        with pytest.raises(Exception, match=r"axes \[-5\] out of range"):
            ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
        return
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("form", ["rows", "rows with duplicates and negatives", "elements", "partial"])
def test_scatter_elements_of_whole_rows_matches_onnxruntime(axis, form, monkeypatch):
    """ScatterElements whose indices move whole rows (constant along every other axis, covering
    it: torchvision's MultiScaleRoIAlign) takes one row assignment; other indices the element
    path. Both give onnxruntime's values, duplicates (last wins) and negative indices included."""
    from ort_ep_cpu.kernels import shape

    monkeypatch.setattr(shape, "ROW_SCATTER_MIN", 0)
    rng = np.random.default_rng(6)
    data_shape = (6, 5, 4)
    n = data_shape[axis]
    index_shape = list(data_shape)
    if form == "partial":
        index_shape[(axis + 1) % 3] -= 1  # does not cover the other axes: element by element
    rows = rng.permutation(n)
    if form == "rows with duplicates and negatives":
        rows = np.array([n - 1, -1, 0, 2] + list(range(n - 4)))[:n] if n > 4 else np.array([1, -1, 1, 0])[:n]
    shape_of_rows = [1, 1, 1]
    shape_of_rows[axis] = n
    indices = np.broadcast_to(rows.reshape(shape_of_rows), index_shape).astype(np.int64)
    if form == "elements":
        indices = rng.integers(-n, n, index_shape).astype(np.int64)
    data = rng.standard_normal(data_shape).astype(np.float32)
    updates = rng.standard_normal(index_shape).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("ScatterElements", ["data", "indices", "updates"], ["y"], axis=axis)], "g",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, data_shape),
         helper.make_tensor_value_info("indices", TensorProto.INT64, index_shape),
         helper.make_tensor_value_info("updates", TensorProto.FLOAT, index_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)]).SerializeToString()
    feeds = {"data": data, "indices": np.ascontiguousarray(indices), "updates": updates}
    want = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.float64])
@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("data_shape", [(9, 16, 3), (9,)])
def test_scatter_elements_reducing_whole_rows_matches_onnxruntime(reduction, dtype, compiled, data_shape, monkeypatch):
    """A graph network's message passing: ScatterElements with a reduction along axis 0 with
    an Expand of edge (or graph) ids as the indices (duplicates, negatives), and the 1-D form.
    The compiled row loop applies each update in order, as the spec's loop and onnxruntime do:
    the same bits; the numpy-only install takes ufunc.at. Out-of-range rows are the element
    path's error; index rows that are not one index are declined to the element path."""
    from compiled_loops import use_compiled

    used = use_compiled(monkeypatch, compiled, "scatter_rows")
    rng = np.random.default_rng(7)
    edges = 40
    rows = rng.integers(-9, 9, edges)
    indices = np.broadcast_to(rows.reshape((edges,) + (1,) * (len(data_shape) - 1)),
                              (edges,) + data_shape[1:]).astype(np.int64)
    kind = {np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64, np.float64: TensorProto.DOUBLE}[dtype]
    data = (rng.standard_normal(data_shape) * 4).astype(dtype)
    updates = (rng.standard_normal(indices.shape) * (0.6 if reduction == "mul" else 4)).astype(dtype)
    if dtype == np.int64 and reduction == "mul":
        updates = rng.integers(-2, 3, indices.shape)
    graph = helper.make_graph(
        [helper.make_node("ScatterElements", ["data", "indices", "updates"], ["y"], axis=0, reduction=reduction)],
        "g", [helper.make_tensor_value_info("data", kind, data_shape),
              helper.make_tensor_value_info("indices", TensorProto.INT64, indices.shape),
              helper.make_tensor_value_info("updates", kind, indices.shape)],
        [helper.make_tensor_value_info("y", kind, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()
    feeds = {"data": data, "indices": np.ascontiguousarray(indices), "updates": updates.astype(dtype)}
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    reference = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(session.run(None, feeds)[0], reference.run(None, feeds)[0])
    if compiled:
        assert used
    if len(data_shape) > 1:  # one index row not one index: the element path, same values
        mixed = feeds["indices"].copy()
        mixed[3, 0, 0] = (mixed[3, 0, 0] + 1) % 9
        feeds_mixed = dict(feeds, indices=mixed)
        np.testing.assert_array_equal(session.run(None, feeds_mixed)[0], reference.run(None, feeds_mixed)[0])
    bad = dict(feeds, indices=np.where(feeds["indices"] == feeds["indices"].reshape(-1)[0], 9, feeds["indices"]))
    with pytest.raises(Exception, match="out of range|out of bounds"):
        session.run(None, bad)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
@pytest.mark.parametrize("largest", [True, False])
def test_top_k_compiled_rows_are_the_numpy_ones(dtype, largest):
    """TopK of up to 16 values a row by the compiled loop (``_jit.top_k_rows``) gives the numpy
    path's values and indices: ties by the lower index, NaN above +inf (largest) or last, -0.0
    equal to 0.0; on any axis. (The numpy path is checked against onnxruntime in
    test_family_b.py, which now runs the compiled one for its small k.)"""
    pytest.importorskip("numba", reason="numba (optional) is not installed")
    from ort_ep_cpu.kernels import _jit, shape

    rng = np.random.default_rng(11)
    for _ in range(150):
        n = int(rng.integers(1, 40))
        k = int(rng.integers(1, min(n, 16) + 1))
        x = rng.integers(-3, 4, (3, n, 2)).astype(dtype)  # many ties
        if np.dtype(dtype).kind == "f":
            pick = rng.random(x.shape)
            x[pick < 0.1] = np.nan
            x[(pick > 0.1) & (pick < 0.15)] = np.inf
            x[(pick > 0.15) & (pick < 0.2)] = -0.0
        got = shape._top_k(x, k, 1, largest, True)
        saved, _jit.USE = _jit.USE, False
        try:
            want = shape._top_k(x, k, 1, largest, True)
        finally:
            _jit.USE = saved
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
