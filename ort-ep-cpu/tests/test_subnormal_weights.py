"""Constant GEMM weights (Conv, Gemm, MatMul, FusedMatMul) with subnormal values: the CPU
provider multiplies by a copy with those values set to 0 (``_util.constant_weight``): numpy's
BLAS has no flush-to-zero mode and a subnormal operand costs a microcode assist per multiply.

Parity with onnxruntime (which computes with the subnormals) on ordinary inputs: rtol 1e-5,
atol 1e-6 on float32 (a flushed weight changes each product by less than 1.2e-38 * |x|). That
the flushed copy is what runs is shown with inputs of 1e30, where 1e-39 * 1e30 = 1e-9 is
visible: those products are then exactly 0."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort
from ort_ep_cpu.kernels._util import constant_weight

SUBNORMAL = np.float32(1e-39)


def _weights(shape, rng, fraction=0.3):
    w = rng.standard_normal(shape).astype(np.float32)
    w[rng.random(shape) < fraction] = SUBNORMAL
    return w


def _model(op, x_shape, w, attrs, domain=""):
    node = helper.make_node(op, ["x", "w"], ["y"], domain=domain, **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * len(x_shape))],
                              [numpy_helper.from_array(w, "w")])
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model.SerializeToString()


CASES = [
    ("Conv", (1, 24, 1, 1), (6, 24, 1, 1), {}, ""),  # squeeze-excite: 1x1 on a 1x1 image
    ("Conv", (1, 8, 9, 9), (4, 8, 3, 3), {"pads": [1, 1, 1, 1]}, ""),
    ("Gemm", (3, 16), (5, 16), {"transB": 1}, ""),
    ("Gemm", (3, 16), (16, 5), {}, ""),
    ("MatMul", (2, 3, 16), (16, 5), {}, ""),
    ("FusedMatMul", (3, 16), (16, 5), {"alpha": 0.5}, "com.microsoft"),
]


@pytest.mark.parametrize("op,x_shape,w_shape,attrs,domain", CASES)
def test_subnormal_weights_match_onnxruntime_and_are_flushed(op, x_shape, w_shape, attrs, domain):
    rng = np.random.default_rng(0)
    w = _weights(w_shape, rng)
    data = _model(op, x_shape, w, attrs, domain)
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    ref = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    x = rng.standard_normal(x_shape).astype(np.float32)
    np.testing.assert_allclose(got.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)

    # all weights subnormal, inputs of 1e30: unflushed, each output would be about 1e-9 * K
    only_subnormal = np.full(w_shape, SUBNORMAL, dtype=np.float32)
    session = ort.InferenceSession(_model(op, x_shape, only_subnormal, attrs, domain),
                                   providers=["CPUExecutionProvider"])
    y = session.run(None, {"x": np.full(x_shape, 1e30, dtype=np.float32)})[0]
    assert np.all(y == 0), "the kernel multiplied by the subnormal weights"


def test_constant_weight_flushes_only_subnormals():
    given = np.array([1.0, SUBNORMAL, -SUBNORMAL, 0.0, np.finfo(np.float32).tiny, np.nan], dtype=np.float32)
    node = type("Node", (), {"inputs": ("x", "w")})()
    value = type("Value", (), {"const_value": given})()
    request = type("Request", (), {"value": lambda self, name: value})()
    kept, flushed = constant_weight(node, request, 1)
    assert kept is given
    np.testing.assert_array_equal(flushed, [1.0, 0.0, 0.0, 0.0, np.finfo(np.float32).tiny, np.nan])
    assert given[1] == SUBNORMAL  # the initializer itself is left as it is
    normal = np.ones(3, dtype=np.float32)
    value.const_value = normal
    assert constant_weight(node, request, 1) == (normal, normal)  # nothing to flush: no copy


def test_flushing_works_across_chunks(monkeypatch):
    """The subnormal scan runs in chunks (bounded temporaries): values in several chunks, and
    in the last partial one, are all flushed."""
    from ort_ep_cpu.kernels import _util

    monkeypatch.setattr(_util, "_SUBNORMAL_CHUNK", 7)
    given = np.arange(1, 31, dtype=np.float32).reshape(5, 6)
    given[0, 1] = given[2, 3] = given[4, 5] = SUBNORMAL
    flushed = _util.without_subnormals(given)
    want = given.copy()
    want[0, 1] = want[2, 3] = want[4, 5] = 0
    np.testing.assert_array_equal(flushed, want)
    assert given[4, 5] == SUBNORMAL


def test_session_creation_makes_no_copy_of_transposed_gemm_weights():
    """A Gemm with transB keeps its (N, K) weights as they are at creation: the (K, N) copy the
    numpy path wants is made at its first run, and oneDNN packs from the transposed view. The
    copy made at creation was a third copy of the weights (the model's, it, oneDNN's). Python
    allocations only (tracemalloc: the initializer's bytes among them, not oneDNN's buffers)."""
    import tracemalloc

    w = np.random.default_rng(0).standard_normal((512, 1024)).astype(np.float32)
    data = _model("Gemm", (2, 1024), w, {"transB": 1})
    ort.InferenceSession(data, providers=["CPUExecutionProvider"])  # imports, compiled loops
    tracemalloc.start()
    try:
        session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1.5 * w.nbytes, f"creation allocated {peak / w.nbytes:.2f}x the weights"
    x = np.random.default_rng(1).standard_normal((2, 1024)).astype(np.float32)
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    # sums of 1024 products of unit normals (|y| up to ~100): another order's rounding, 1e-4
    np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=1e-5, atol=2e-4)
