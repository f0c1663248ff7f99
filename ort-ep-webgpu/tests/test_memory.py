"""Allocator (pool by size class, statistics, limit) and data transfer (bit-exact copies)."""

from __future__ import annotations

import numpy as np
import pytest

import ort_core as ort
from conftest import PROVIDERS, needs_adapter
from ort_core.testing import models
from ort_ep_webgpu.runtime import size_class

pytestmark = needs_adapter


def test_size_classes():
    assert size_class(1) == 256
    assert size_class(256) == 256
    assert size_class(257) == 512
    assert size_class(3000) == 4096
    assert size_class(1 << 24) == 1 << 24
    assert size_class((1 << 24) + 1) == (1 << 24) + (1 << 22)


def _runtime(session):
    bp = next(b for b in session._providers if b.name == "WebGpuExecutionProvider")
    return bp.ctx.state["runtime"]


def test_pool_reuses_buffers_across_runs():
    model = models.mlp(in_features=32, hidden=64, layers=2)
    session = ort.InferenceSession(model, providers=PROVIDERS)
    feeds = models.random_inputs(model, batch=4)
    session.run(None, feeds)
    rt = _runtime(session)
    first = rt.pool.stats()
    reused_before = rt.pool.reused
    session.run(None, feeds)
    second = rt.pool.stats()
    # the second run allocates as many buffers, all from the free lists: no new GPU memory
    assert second.num_allocs > first.num_allocs
    assert second.total_allocated_bytes == first.total_allocated_bytes
    assert rt.pool.reused - reused_before == second.num_allocs - first.num_allocs
    assert second.in_use_bytes == first.in_use_bytes  # everything a run made was given back
    stats = session.get_memory_stats()["WebGpu"]
    assert stats["allocator_num_allocs"] == second.num_allocs
    assert stats["allocator_reserved_bytes"] >= stats["allocator_in_use_bytes"] > 0


def test_memory_limit_is_enforced_with_the_option_named():
    model = models.mlp(in_features=256, hidden=512, layers=3)
    with pytest.raises(MemoryError, match="memory_limit_mb"):
        session = ort.InferenceSession(model, providers=[("WebGpuExecutionProvider", {"memory_limit_mb": "1"})])
        session.run(None, models.random_inputs(model))


def _transfer():
    session = ort.InferenceSession(models.mlp(in_features=4, hidden=4, layers=1), providers=PROVIDERS)
    bp = next(b for b in session._providers if b.name == "WebGpuExecutionProvider")
    return session, bp.data_transfer


@pytest.mark.parametrize(
    "array",
    [
        np.array([[1.5, -0.0, np.inf], [np.nan, 3e-39, -7.25]], np.float32),
        np.arange(7, dtype=np.float16) / np.float16(3),  # odd byte count (14 bytes)
        np.array([-(2**63), -(2**31) - 1, 0, 2**31, 2**63 - 1], np.int64),
        np.array([1.0 / 3, -np.inf, 5e-324], np.float64),  # held as raw bytes, no kernel takes it
        np.arange(5, dtype=np.int8),
        np.array([1, -5, 7], np.int32),
        np.array([True, False, True], np.bool_),
        np.zeros((0, 3), np.float32),
    ],
    ids=["float32", "float16", "int64", "float64", "int8", "int32", "bool", "empty"],
)
def test_data_transfer_round_trip_is_bit_exact(array):
    _session, transfer = _transfer()
    device = transfer.to_device(array)
    assert device.shape == array.shape and device.dtype == array.dtype and device.nbytes == array.nbytes
    back = transfer.to_host(device)
    assert back.dtype == array.dtype and back.shape == array.shape
    assert back.tobytes() == array.tobytes()


def test_int64_values_outside_int32_move_exactly_through_copy_kernels():
    """int64 is held as 8 bytes: Transpose/Gather/Concat/Slice copy whole elements."""
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
        helper.make_node("Gather", ["t", "idx"], ["g"], axis=0),
        helper.make_node("Concat", ["g", "g"], ["y"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "int64",
        [helper.make_tensor_value_info("x", TensorProto.INT64, [2, 3]),
         helper.make_tensor_value_info("idx", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [2, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model, providers=PROVIDERS)
    assert set(session.get_placement().counts()) == {"WebGpuExecutionProvider"}
    x = np.array([[2**40, -(2**35), 7], [-1, 2**62, -(2**63)]], np.int64)
    idx = np.array([2, -3], np.int64)
    g = x.T[[2, 0]]
    np.testing.assert_array_equal(session.run(None, {"x": x, "idx": idx})[0], np.concatenate([g, g], axis=1))
