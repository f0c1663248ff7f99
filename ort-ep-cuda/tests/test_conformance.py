"""ONNX backend node cases of every op the provider claims, with CUDA first and CPU as
fallback, scored by the shared harness (onnx's tolerances). Without a GPU this runs the kernels
on the FAKE device (numpy standing in for CuPy); on a GPU, on CuPy."""

from __future__ import annotations

import pytest

import ort_ep_cuda.plugin  # noqa: F401  (registers the kernels)
from conftest import KNOWN_FAILURES
from ort_core.testing.conformance import load_cases, run_case, run_suite
from ort_ep_cuda.registry import registered_ops

# HEURISTIC: the node suite has ~100 convolution cases, each a new session; EXHAUSTIVE (timing
# every cuDNN plan) is tested in tests/test_gpu.py
PROVIDERS = [("CUDAExecutionProvider", {"cudnn_conv_algo_search": "HEURISTIC"}), "CPUExecutionProvider"]
OPS = set(registered_ops()) | {f"com.microsoft::{op}" for op in registered_ops("com.microsoft")}


@pytest.fixture(scope="module")
def score():
    cases = [c for c in load_cases(("node",)) if c.op in OPS]
    assert len(cases) > 1000  # guards against loading nothing (1243 with onnx 1.23.2)
    return run_suite(cases, PROVIDERS, timeout=120)


def test_node_cases_of_claimed_ops_pass(score):
    cases = {c.name: c for c in load_cases(("node",))}
    unexplained = []
    for result in score.failures:
        if result.name in KNOWN_FAILURES:
            continue
        # a case that fails with the CPU provider alone is not the CUDA provider's failure
        if run_case(cases[result.name], ["CPUExecutionProvider"]).passed:
            unexplained.append(f"{result.name}: {result.message[:300]}")
    assert not unexplained, "\n".join(unexplained)


def test_cases_really_run_on_cuda(score):
    """Most passing cases ran every node on the CUDA provider."""
    whole = [r for r in score.results if r.passed and set(r.nodes) == {"CUDAExecutionProvider"}]
    assert len(whole) >= 900, len(whole)  # measured on the fake device: 972 of 1243
    ops_on_cuda = {r.op for r in whole}
    for op in ("Add", "MatMul", "Gemm", "Conv", "ConvTranspose", "MaxPool", "AveragePool", "Softmax",
               "LayerNormalization", "ReduceMean", "Transpose", "Reshape", "Gather", "Concat", "Slice", "Where",
               "Cast", "Erf", "Tanh", "Sigmoid", "Resize", "Expand", "BatchNormalization", "Split", "Gelu"):
        assert op in ops_on_cuda, f"no {op} case ran wholly on CUDA"
