"""With ``split_compiled_loops`` on, the compiled loops split over the session's
``intra_op_num_threads`` (``threads.parallel_for``):
depthwise convolution (both loops), HardSigmoid (op and FusedConv activation) and com.microsoft
Gelu. Each case is large enough to be split, checks parity with onnxruntime (float32, rtol and
atol 1e-4 for convolutions, whose sums run in another order; 1e-5 for the elementwise ops),
that a split happened at 2 threads and none at 1, and that 1 and 2 threads give identical
results (every part computes whole channels or rows with the same arithmetic).
"""

from __future__ import annotations

import threading

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import ort_core as ort
from ort_ep_cpu import threads
from ort_ep_cpu.kernels import _jit, nn

pytest.importorskip("numba", reason="numba (optional) is not installed: nothing is split")
MS = "com.microsoft"


@pytest.fixture(autouse=True)
def _compiled(monkeypatch):
    monkeypatch.setattr(_jit, "USE", True)


def _model(node, x_shape, inits=()) -> bytes:
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * len(x_shape))], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model.SerializeToString()


def _depthwise(c: int, k: int, strides, op: str = "Conv", **attrs) -> bytes:
    rng = np.random.default_rng(1)
    w = onnx.numpy_helper.from_array(rng.standard_normal((c, 1, k, k)).astype(np.float32), "w")
    b = onnx.numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b")
    node = helper.make_node(op, ["x", "w", "b"], ["y"], group=c, pads=[k // 2] * 4, strides=strides,
                            domain=MS if op == "FusedConv" else "", **attrs)
    return node, [w, b]


def _session(data: bytes, count: int, split: bool = True):
    so = ort.SessionOptions()
    so.intra_op_num_threads = count
    options = {"split_compiled_loops": "1" if split else "0"}
    return ort.InferenceSession(data, so, providers=[("CPUExecutionProvider", options)])


CASES = {
    # 32 channels of 24x24 (stride 1, accumulator fits L1: the flat loop), 5x5 taps
    "depthwise-flat": (*_depthwise(32, 5, [1, 1]), (1, 32, 24, 24), 1e-4),
    # 40x40 planes: the row loop; stride 2 too
    "depthwise-rows": (*_depthwise(24, 3, [1, 1]), (1, 24, 90, 90), 1e-4),
    "depthwise-stride2": (*_depthwise(16, 5, [2, 2]), (2, 16, 80, 80), 1e-4),
    "fusedconv-hardsigmoid": (*_depthwise(16, 3, [1, 1], "FusedConv", activation="HardSigmoid",
                                          activation_params=[0.2, 0.5]), (1, 16, 80, 80), 1e-4),
    "hardsigmoid": (helper.make_node("HardSigmoid", ["x"], ["y"], alpha=0.3, beta=0.4), [], (1, 16, 90, 90), 1e-5),
    "gelu": (helper.make_node("Gelu", ["x"], ["y"], domain=MS), [], (50, 700), 1e-5),
}


@pytest.mark.parametrize("case", list(CASES))
def test_split_matches_onnxruntime_and_one_thread(case):
    node, inits, x_shape, tol = CASES[case]
    data = _model(node, x_shape, inits)
    x = np.random.default_rng(2).standard_normal(x_shape).astype(np.float32) * 3
    results = {}
    for count in (1, 2):
        ref = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        got = _session(data, count)
        before = threads.parallel_calls
        results[count] = got.run(None, {"x": x})[0]
        split = threads.parallel_calls - before
        assert (split > 0) == (count == 2), f"{case}: {split} split calls at {count} thread(s)"
        np.testing.assert_allclose(results[count], ref, rtol=tol, atol=tol)
    np.testing.assert_array_equal(results[1], results[2])


def test_no_split_by_default():
    """Off by default (it did not pay on a 2-core machine): 2 threads, no split."""
    node, inits, x_shape, _ = CASES["depthwise-rows"]
    data = _model(node, x_shape, inits)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    before = threads.parallel_calls
    sess.run(None, {"x": np.ones(x_shape, np.float32)})
    assert threads.parallel_calls == before
    with pytest.raises(ValueError, match="split_compiled_loops"):
        ort.InferenceSession(data, so, providers=[("CPUExecutionProvider", {"split_compiled_loops": "maybe"})])


def test_small_calls_are_not_split():
    node, inits, _, _ = CASES["depthwise-flat"]
    data = _model(node, (1, 32, 6, 6), inits)  # 32 * 36 * 25 multiply-adds: under PARALLEL_MIN_MACS
    before = threads.parallel_calls
    _session(data, 2).run(None, {"x": np.ones((1, 32, 6, 6), np.float32)})
    assert threads.parallel_calls == before


def test_concurrent_sessions_with_different_thread_counts():
    """Sessions of 1, 2 and 3 threads (more than this machine may have: parts queue on the
    pool) run at the same time from three threads; each result equals onnxruntime's."""
    node, inits, x_shape, tol = CASES["depthwise-rows"]
    data = _model(node, x_shape, inits)
    ref = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    feeds = [rng.standard_normal(x_shape).astype(np.float32) for _ in range(4)]
    want = [ref.run(None, {"x": x})[0] for x in feeds]
    errors: list[BaseException] = []

    def work(count: int) -> None:
        try:
            sess = _session(data, count)
            for _ in range(5):
                for x, w in zip(feeds, want):
                    np.testing.assert_allclose(sess.run(None, {"x": x})[0], w, rtol=tol, atol=tol)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    workers = [threading.Thread(target=work, args=(n,)) for n in (1, 2, 3)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert not errors, errors


def test_kernel_threads_follow_the_session():
    assert threads.kernel_threads() == 1  # outside a build
    with threads.building(0):
        assert threads.kernel_threads() == threads.cores()
        with threads.building(3):
            assert threads.kernel_threads() == 3
        assert threads.kernel_threads() == threads.cores()
    assert threads.kernel_threads() == 1


def test_parallel_for_covers_the_range_and_raises():
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()

    def part(lo: int, hi: int) -> None:
        with lock:
            seen.append((lo, hi))
    threads.parallel_for(part, 3, 10, 4)
    assert sorted(seen) == [(3, 4), (4, 6), (6, 8), (8, 10)]
    seen.clear()
    threads.parallel_for(part, 0, 2, 5)  # more parts than items: one item each
    assert sorted(seen) == [(0, 1), (1, 2)]

    def fail(lo: int, hi: int) -> None:
        if lo > 0:
            raise ValueError("part failed")
    with pytest.raises(ValueError, match="part failed"):
        threads.parallel_for(fail, 0, 4, 2)


def test_direct_conv_call_defaults_to_one_thread():
    """``nn.conv`` called outside a session (threads=1) does not split."""
    x = np.random.default_rng(4).standard_normal((1, 32, 24, 24)).astype(np.float32)
    w = np.random.default_rng(5).standard_normal((32, 1, 5, 5)).astype(np.float32)
    g = nn._Geometry((24, 24), (5, 5), (1, 1), (1, 1), [2, 2, 2, 2])
    before = threads.parallel_calls
    one = nn.conv(x, w, None, 32, g, (5, 5))
    assert threads.parallel_calls == before
    two = nn.conv(x, w, None, 32, g, (5, 5), threads=2)
    assert threads.parallel_calls == before + 1
    np.testing.assert_array_equal(one, two)
