"""ONNX backend node suite (a focused slice; the full suite's numbers are in the README):
OpenVINO in front of the CPU provider passes no fewer cases than the CPU provider alone,
and OpenVINO takes the nodes it supports."""

from __future__ import annotations

import pytest

from conftest import CPU, OV
from ort_core.testing.conformance import load_cases, run_suite

# the ops of the models this provider is for (CNNs, OCR, transformers, audio), and some
# where OpenVINO is known to differ from ONNX (which the provider must decline)
PATTERN = (
    r"^test_(conv|gemm|matmul|relu|sigmoid|softmax|add|mul|sub|div|batchnorm|maxpool|averagepool"
    r"|globalaveragepool|reshape|transpose|concat|slice|gather|unsqueeze|squeeze|resize|layer_norm"
    r"|hardswish|hardsigmoid|erf|tanh|pow|sqrt|reduce_mean|cast|where|expand|shape|split|pad"
    r"|topk|top_k|bitshift|tile|lstm|gru|clip|leakyrelu|prelu|instancenorm)"
)


@pytest.fixture(scope="module")
def cases():
    found = load_cases(("node",), pattern=PATTERN)
    assert len(found) > 300
    return found


def test_not_fewer_passes_than_cpu_alone(cases):
    # every fragment to OpenVINO: the slice measures what it supports (the cases' multi-node
    # models split into fragments the default min_subgraph_size leaves to the CPU provider)
    with_ov = run_suite(cases, [(OV, {"min_subgraph_size": "1"}), CPU], timeout=60)
    cpu_only = run_suite(cases, [CPU], timeout=60)
    passed_ov = {r.name for r in with_ov.results if r.passed}
    passed_cpu = {r.name for r in cpu_only.results if r.passed}
    broken = sorted(passed_cpu - passed_ov)
    assert not broken, "OpenVINO breaks cases the CPU provider passes:\n" + "\n".join(
        f"{r.name}: {r.message[:200]}" for r in with_ov.results if r.name in broken
    )
    # OpenVINO really runs them: it takes most nodes of the slice
    taken = sum(r.nodes.get(OV, 0) for r in with_ov.results)
    total = sum(sum(r.nodes.values()) for r in with_ov.results)
    assert taken >= 0.8 * total, f"OpenVINO took {taken} of {total} nodes"
