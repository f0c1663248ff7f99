"""The per-call helpers of the compiled and oneDNN paths: an array's data address read from
numpy's struct (``_util.data_address``) and the usable core count counted once per session
(``threads.usable``)."""

from __future__ import annotations

import numpy as np
import pytest

import ort_core as ort
from ort_ep_cpu import threads
from ort_ep_cpu.kernels import _util


@pytest.mark.parametrize("make", [
    lambda: np.arange(12, dtype=np.float32),
    lambda: np.arange(20, dtype=np.uint8).reshape(4, 5)[1:, 2:],  # a view inside another array
    lambda: np.zeros((3, 4)).T,  # not C-contiguous
    lambda: np.zeros(0, np.int32),
    lambda: np.zeros((2, 3), np.int64)[::-1],  # a negative stride: the address of element [0, 0]
], ids=["plain", "view", "transposed", "empty", "reversed"])
def test_data_address_is_numpys(make):
    a = make()
    assert _util.data_address(a) == a.ctypes.data


def test_data_address_refuses_what_is_not_an_array():
    with pytest.raises(TypeError, match="float32"):
        _util.data_address(np.float32(1.0))


def test_usable_cores_are_counted_when_a_session_starts(monkeypatch):
    """Counted at import and at each session's start (not at every kernel call)."""
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    threads.limit(0, blas=0)
    try:
        assert threads.usable() == 3
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
        assert threads.usable() == 3  # until the next session starts
    finally:
        threads.restore()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 0
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    assert threads.usable() == 1
    del session
    monkeypatch.undo()
    threads.limit(0, blas=0)  # counted again for the tests after this one
    threads.restore()
