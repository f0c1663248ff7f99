"""ONNX backend node cases of every op the provider registers, run with WebGPU first and CPU
as fallback, scored by the shared harness (onnx's tolerances)."""

from __future__ import annotations

import pytest

import ort_ep_webgpu.plugin  # noqa: F401  (registers the kernels)
from conftest import KNOWN_FAILURES, PROVIDERS, needs_adapter
from ort_core.testing.conformance import load_cases, run_case, run_suite
from ort_ep_webgpu.registry import registered_ops

pytestmark = needs_adapter


@pytest.fixture(scope="module")
def score():
    ops = set(registered_ops())
    cases = [c for c in load_cases(("node",)) if c.op in ops]
    assert len(cases) > 300  # guards against loading nothing
    return run_suite(cases, PROVIDERS, timeout=120)


def test_node_cases_of_claimed_ops_pass(score):
    cases = {c.name: c for c in load_cases(("node",))}
    unexplained = []
    for result in score.failures:
        if result.name in KNOWN_FAILURES:
            continue
        # a case that fails with the CPU provider alone is not the WebGPU provider's failure
        alone = run_case(cases[result.name], ["CPUExecutionProvider"])
        if alone.passed:
            unexplained.append(f"{result.name}: {result.message[:300]}")
    assert not unexplained, "\n".join(unexplained)


def test_cases_really_run_on_webgpu(score):
    """Most passing cases ran every node on WebGPU (measured on lavapipe: 604 of 980)."""
    whole = [r for r in score.results if r.passed and set(r.nodes) == {"WebGpuExecutionProvider"}]
    assert len(whole) >= 550, len(whole)
    ops_on_gpu = {r.op for r in whole}
    for op in ("Add", "MatMul", "Gemm", "Conv", "MaxPool", "AveragePool", "Softmax", "LayerNormalization",
               "ReduceMean", "Transpose", "Reshape", "Gather", "Concat", "Slice", "Where", "Cast", "Erf",
               "Tanh", "Sigmoid", "Flatten", "Squeeze", "Unsqueeze", "BatchNormalization", "Split"):
        assert op in ops_on_gpu, f"no {op} case ran wholly on WebGPU"
