"""Tile, Split, Expand, ScatterElements and OneHot on the small tensors of decoder loops (a
table-structure model's Loop body runs each every step): without numpy's Python-level helpers
(np.tile, np.split, np.broadcast_to, np.indices per call, np.moveaxis to the last axis), and equal
to onnxruntime, exactly (they move values only)."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort
from ort_ep_cpu.kernels import tensor


def _model(op, inputs, consts, n_out=1, out_type=None, opset=17, **attrs) -> bytes:
    names = [f"i{k}" for k in range(len(inputs))] + [f"c{k}" for k in range(len(consts))]
    node = helper.make_node(op, names, [f"y{k}" for k in range(n_out)], **attrs)
    elem = out_type or helper.np_dtype_to_tensor_dtype(inputs[0].dtype)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(f"i{k}", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for k, x in enumerate(inputs)],
        [helper.make_tensor_value_info(f"y{k}", elem, None) for k in range(n_out)],
        [numpy_helper.from_array(c, f"c{k}") for k, c in enumerate(consts)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10).SerializeToString()


def _same_as_onnxruntime(data: bytes, inputs: list[np.ndarray], runs: int = 3) -> None:
    feeds = {f"i{k}": x for k, x in enumerate(inputs)}
    expected = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for _ in range(runs):  # the same shapes again: per-shape caches are reused, not corrupted
        got = session.run(None, feeds)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.dtype == e.dtype and g.shape == e.shape
            np.testing.assert_array_equal(g, e)


@pytest.fixture
def no_slow_helpers(monkeypatch):
    """Fails a test whose run reaches the numpy helpers these kernels no longer use."""
    def refuse(name):
        def call(*args, **kwargs):
            raise AssertionError(f"np.{name} was called")
        return call
    for name in ("tile", "split", "broadcast_to", "moveaxis"):
        monkeypatch.setattr(np, name, refuse(name))


RNG = np.random.default_rng(0)


@pytest.mark.parametrize("shape, reps", [
    ((1, 1, 1), (1, 1, 30)), ((2, 3), (3, 2)), ((2, 3, 4), (1, 1, 1)), ((0, 3), (2, 2)), ((2, 1), (0, 5)), ((), ()),
])
def test_tile(no_slow_helpers, shape, reps):
    x = RNG.integers(-9, 9, shape).astype(np.int64)
    _same_as_onnxruntime(_model("Tile", [x], [np.array(reps, np.int64)]), [x])


def test_tile_matches_numpy_on_many_shapes():
    for rank in range(5):
        for _ in range(20):
            shape = tuple(int(d) for d in RNG.integers(0, 4, rank))
            reps = [int(r) for r in RNG.integers(0, 4, rank)]
            x = RNG.standard_normal(shape).astype(np.float32)
            np.testing.assert_array_equal(tensor.tile(x, reps), np.tile(x, reps))


@pytest.mark.parametrize("shape, axis, sizes, n_out", [
    ((1, 768), 1, [256, 512], 2), ((1, 768), 1, None, 3), ((6, 4), 0, None, 2), ((4, 6), -1, [1, 2, 3], 3),
    ((4, 6), 1, [6], 1), ((3, 0), 1, [0, 0], 2),
])
def test_split(no_slow_helpers, shape, axis, sizes, n_out):
    x = RNG.standard_normal(shape).astype(np.float32)
    consts = [] if sizes is None else [np.array(sizes, np.int64)]
    _same_as_onnxruntime(_model("Split", [x], consts, n_out=n_out, axis=axis), [x])


def test_split_parts_are_views_of_the_input():
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    parts = tensor._split(_Node(axis=1, n_out=2), None)(x, np.array([2, 4], np.int64))
    assert all(np.shares_memory(p, x) for p in parts)
    np.testing.assert_array_equal(np.concatenate(parts, axis=1), x)


class _Node:
    """The node attributes the Split kernel reads."""

    def __init__(self, axis: int, n_out: int):
        self.outputs = [f"y{k}" for k in range(n_out)]
        self._attrs = {"axis": axis}

    def attr(self, name, default=None):
        return self._attrs.get(name, default)


@pytest.mark.parametrize("shape, target", [
    ((1, 1, 30), (1, 1, 30)), ((1, 1), (4, 30)), ((3, 1), (2, 1, 6)), ((), (2, 2)), ((2, 1, 3), (1, 4, 1)),
])
def test_expand(no_slow_helpers, shape, target):
    x = RNG.standard_normal(shape).astype(np.float32)
    _same_as_onnxruntime(_model("Expand", [x], [np.array(target, np.int64)]), [x])


def test_expand_of_incompatible_shapes_names_both():
    x = np.ones((3, 2), np.float32)
    session = ort.InferenceSession(_model("Expand", [x], [np.array([4, 3], np.int64)]), providers=["CPUExecutionProvider"])
    with pytest.raises(ort.OrtError, match=r"\(3, 2\) and \(4, 3\) cannot be broadcast"):
        session.run(None, {"i0": x})


@pytest.mark.parametrize("data_shape, axis, indices", [((3, 30), 1, [[3]]), ((3, 3), 0, [[1, 0, 2]]),
                                                      ((3, 30), 1, [[-1], [0]])])
def test_scatter_elements(data_shape, axis, indices):
    idx = np.array(indices, np.int64)
    data = np.zeros(data_shape, np.float32)
    updates = RNG.standard_normal(idx.shape).astype(np.float32)
    _same_as_onnxruntime(_model("ScatterElements", [data, idx, updates], [], axis=axis), [data, idx, updates])


@pytest.mark.parametrize("indices, axis", [([5], -1), ([[1, -2], [0, 29]], -1), ([[1, 2]], 2)])
def test_one_hot_onto_the_last_axis(no_slow_helpers, indices, axis):
    idx = np.array(indices, np.int64)
    consts = [np.array(30, np.int64), np.array([0, 1], np.float32)]
    _same_as_onnxruntime(_model("OneHot", [idx], consts, out_type=TensorProto.FLOAT, axis=axis), [idx])


def test_one_hot_onto_another_axis():
    idx = np.array([[1, -2, 4]], np.int64)
    consts = [np.array(5, np.int64), np.array([-1, 3], np.float32)]
    _same_as_onnxruntime(_model("OneHot", [idx], consts, out_type=TensorProto.FLOAT, axis=0), [idx])
