"""Cross-cutting plugins: OpVeto moves vetoed nodes to the next provider with the reason;
KernelTracer records every kernel execution. Neither registers a provider."""

from __future__ import annotations

from typing import Any

import numpy as np

import ort_core
from conftest import chain_model
from fake_providers import HostProvider
from ort_core.testing.plugins import KernelTracer, OpVeto


def _providers(registry: Any) -> None:
    assert ort_core.register(HostProvider("KitHostExecutionProvider"), "kit-host")
    assert ort_core.register(HostProvider(), "host-cpu")  # stands in for the CPU provider


def test_veto_sends_nodes_to_the_next_provider_with_the_reason(registry: Any) -> None:
    _providers(registry)
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    plain = ort_core.InferenceSession(chain_model(), providers=["KitHostExecutionProvider"])
    veto = OpVeto("KitHostExecutionProvider", ops=["Relu"], reason="Relu is vetoed here")
    with veto.installed():
        assert "KitHostExecutionProvider" in registry.providers()  # a veto adds no provider
        vetoed = ort_core.InferenceSession(chain_model(), providers=["KitHostExecutionProvider"])
    placed = {p.name: p for p in vetoed.get_placement().nodes}
    assert placed["relu1"].provider == "CPUExecutionProvider"
    assert placed["relu1"].declined["KitHostExecutionProvider"] == "Relu is vetoed here"
    assert placed["add"].provider == "KitHostExecutionProvider"
    np.testing.assert_array_equal(vetoed.run(None, {"x": x})[0], plain.run(None, {"x": x})[0])
    # unregistered after the block: new sessions are unaffected
    again = ort_core.InferenceSession(chain_model(), providers=["KitHostExecutionProvider"])
    assert {p.provider for p in again.get_placement().nodes} == {"KitHostExecutionProvider"}


def test_veto_by_node_name_and_other_providers_untouched(registry: Any) -> None:
    _providers(registry)
    with OpVeto("KitHostExecutionProvider", nodes=["mul"]).installed():
        sess = ort_core.InferenceSession(chain_model(), providers=["KitHostExecutionProvider"])
    placed = {p.name: p.provider for p in sess.get_placement().nodes}
    assert placed["mul"] == "CPUExecutionProvider"  # the veto names one provider only
    assert placed["relu1"] == placed["relu2"] == "KitHostExecutionProvider"


def test_tracer_records_each_kernel_run(registry: Any) -> None:
    _providers(registry)
    tracer = KernelTracer()
    with tracer.installed():
        sess = ort_core.InferenceSession(chain_model(), providers=["KitHostExecutionProvider"])
    x = np.ones((2, 4), np.float32)
    for _ in range(3):
        sess.run(None, {"x": x})
    summary = tracer.summary()
    names = [p.name for p in sess.get_placement().nodes]
    assert set(summary) == set(names)
    assert all(s.calls == 3 and s.total_ns >= 0 for s in summary.values())
    assert summary["add"].provider == "KitHostExecutionProvider" and summary["add"].op_type == "Add"
    events = tracer.chrome_trace()
    assert len(events) == 3 * len(names) and all(e["ph"] == "X" for e in events)


def test_tracer_limited_to_chosen_providers_and_records_failures(registry: Any) -> None:
    _providers(registry)
    tracer = KernelTracer(providers=["CPUExecutionProvider"])
    with tracer.installed(), OpVeto("KitHostExecutionProvider", ops=["Sub"]).installed():
        sess = ort_core.InferenceSession(chain_model(), providers=["KitHostExecutionProvider"])
    sess.run(None, {"x": np.ones((2, 4), np.float32)})
    assert {r.node for r in tracer.records} == {"sub"}
    assert all(r.ok for r in tracer.records)
