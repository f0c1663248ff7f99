"""Partitioning, fallback, copies between devices, the placement report and strict mode."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_core as ort
from conftest import chain_expected, chain_model, make_model
from fake_providers import FakeDeviceProvider, HostProvider

FAKE = "FakeDeviceExecutionProvider"
CPU = "CPUExecutionProvider"


def test_fallback_places_unsupported_nodes_on_the_next_provider(host, fake):
    sess = ort.InferenceSession(chain_model().SerializeToString(), providers=[FAKE, CPU])
    placement = sess.get_placement()
    where = {p.name: p.provider for p in placement.nodes}
    assert where == {"add": FAKE, "relu1": FAKE, "mul": CPU, "relu2": FAKE, "sub": CPU}
    mul = next(p for p in placement.nodes if p.name == "mul")
    assert mul.declined == {FAKE: "Mul is not supported by the fake device"}
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    (y,) = sess.run(None, {"x": x})
    assert isinstance(y, np.ndarray)
    np.testing.assert_allclose(y, chain_expected(x), rtol=1e-6)


def test_copies_are_inserted_where_neighbours_live_on_different_devices(host, fake):
    sess = ort.InferenceSession(chain_model(), providers=[FAKE, CPU])
    copies = {(c.value, c.source, c.target) for c in sess.get_placement().copies}
    assert copies == {
        ("x", "Cpu", "Fake:0"),  # graph input to add
        ("r1", "Fake:0", "Cpu"),  # relu1 -> mul on CPU
        ("m", "Cpu", "Fake:0"),  # mul -> relu2 on the device
        ("r2", "Fake:0", "Cpu"),  # relu2 -> sub on CPU
    }
    x = np.ones((2, 4), np.float32)
    sess.run(None, {"x": x})
    assert fake.to_device_calls == 2 + 1  # x and m per run, plus the initializer w once
    assert fake.to_host_calls == 2


def test_initializers_are_copied_to_the_device_once(host, fake):
    sess = ort.InferenceSession(chain_model(), providers=[FAKE, CPU])
    after_creation = fake.to_device_calls
    for _ in range(3):
        sess.run(None, {"x": np.ones((1, 4), np.float32)})
    assert after_creation == 1
    assert fake.to_device_calls == 1 + 3 * 2


def test_two_devices_copy_through_host(registry):
    a = FakeDeviceProvider("AExecutionProvider", ops={"Add"}, memory="A:0")
    b = FakeDeviceProvider("BExecutionProvider", ops={"Relu", "Mul", "Sub"}, memory="B:0")
    ort.register(a, "a")
    ort.register(b, "b")
    sess = ort.InferenceSession(chain_model(), providers=["AExecutionProvider", "BExecutionProvider"])
    copies = {(c.value, c.source, c.target) for c in sess.get_placement().copies}
    assert ("a", "A:0", "B:0") in copies
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], chain_expected(x), rtol=1e-6)


def test_fused_group_runs_as_one_step_from_an_onnx_model(host, registry):
    fused = FakeDeviceProvider("FusedExecutionProvider", ops={"Add", "Relu"}, fuse=True)
    ort.register(fused, "fused")
    # add -> relu1 is a connected group; relu2 sits after mul (CPU); fusing all three Add/Relu
    # nodes would need mul's output inside the group: a cycle, so the group is refused.
    sess = ort.InferenceSession(chain_model(), providers=["FusedExecutionProvider", CPU])
    placement = sess.get_placement()
    declined = {p.name: p.declined.get("FusedExecutionProvider") for p in placement.nodes}
    assert declined["add"] == "fusing its group would create a cycle"
    assert all(p.provider == CPU for p in placement.nodes)


def test_fused_group_without_cycle(host, registry):
    fused = FakeDeviceProvider("FusedExecutionProvider", ops={"Add", "Relu", "Mul"}, fuse=True)
    ort.register(fused, "fused")
    sess = ort.InferenceSession(chain_model(), providers=["FusedExecutionProvider", CPU])
    placement = sess.get_placement()
    groups = {p.name: p.group for p in placement.nodes}
    assert groups == {"add": 0, "relu1": 0, "mul": 0, "relu2": 0, "sub": None}
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], chain_expected(x), rtol=1e-6)


def test_a_fused_group_takes_an_overridable_initializer_as_an_input(host, registry):
    """An initializer that is also a graph input (a feed may replace it: LoRA weights, a
    threshold) is an input of the fused group and its model, not a constant baked into the
    compiled group: the fed value is used, and the default where none is fed."""
    fused = FakeDeviceProvider("FusedExecutionProvider", ops={"Add", "Relu", "Mul"}, fuse=True)
    ort.register(fused, "fused")
    model = chain_model()
    model.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [4]))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["FusedExecutionProvider", CPU])
    assert {p.name: p.group for p in sess.get_placement().nodes}["mul"] == 0
    group = [i for i, n in enumerate(sess._graph.nodes) if n.name in ("add", "relu1", "mul", "relu2")]
    assert sess._graph.group_io(group)[0] == ("x", "w")
    exported = sess._graph.group_to_model(group)
    assert [i.name for i in exported.graph.input] == ["x", "w"] and not exported.graph.initializer
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], chain_expected(x), rtol=1e-6)
    w = np.array([0.5, 1.0, -1.0, 2.0], np.float32)
    want = np.maximum(np.maximum(x + w, 0) * w, 0) - x
    np.testing.assert_allclose(sess.run(None, {"x": x, "w": w})[0], want, rtol=1e-6)


def test_warning_line_summarises_fallback(host, fake, caplog):
    with caplog.at_level(logging.WARNING, logger="ort_core"):
        ort.InferenceSession(chain_model(), providers=[FAKE, CPU])
    lines = [r.getMessage() for r in caplog.records if FAKE in r.getMessage()]
    assert lines == [f"{FAKE} runs 3/5 nodes; the others fell back: Mul x1, Sub x1"]


def test_strict_mode_turns_fallback_into_an_error_naming_nodes(host, fake):
    options = ort.SessionOptions()
    options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    with pytest.raises(ort.EPFail) as info:
        ort.InferenceSession(chain_model(), options, providers=[FAKE])
    assert "mul (Mul)" in str(info.value) and "sub (Sub)" in str(info.value)


def test_strict_mode_passes_when_the_accelerator_takes_everything(host, registry):
    everything = FakeDeviceProvider("AllExecutionProvider", ops={"Add", "Relu", "Mul", "Sub"})
    ort.register(everything, "all")
    options = ort.SessionOptions()
    options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    sess = ort.InferenceSession(chain_model(), options, providers=["AllExecutionProvider"])
    assert sess.get_placement().counts() == {"AllExecutionProvider": 5}


def test_provider_without_device_is_skipped_with_a_warning(host, registry, caplog):
    absent = FakeDeviceProvider("AbsentExecutionProvider", devices=False)
    ort.register(absent, "absent")
    assert "AbsentExecutionProvider" not in ort.get_available_providers()
    with caplog.at_level(logging.WARNING, logger="ort_core"):
        sess = ort.InferenceSession(chain_model(), providers=["AbsentExecutionProvider", CPU])
    assert sess.get_providers() == [CPU]
    assert any("no fake device plugged in" in r.getMessage() for r in caplog.records)
    options = ort.SessionOptions()
    options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    with pytest.raises(ort.EPFail, match="no fake device plugged in"):
        ort.InferenceSession(chain_model(), options, providers=["AbsentExecutionProvider", CPU])


def test_capability_hook_that_raises_declines_everything_for_that_provider_only(host, registry):
    class Broken(FakeDeviceProvider):
        @ort.hookimpl
        def ort_get_capability(self, ep, graph, candidates):
            if ep.name == self.name:
                raise RuntimeError("boom")

    ort.register(Broken("BrokenExecutionProvider"), "broken")
    sess = ort.InferenceSession(chain_model(), providers=["BrokenExecutionProvider", CPU])
    node = sess.get_placement().nodes[0]
    assert node.provider == CPU
    assert node.declined["BrokenExecutionProvider"] == "capability query raised RuntimeError: boom"


def test_kernel_creation_failure_falls_back_with_the_reason(host, registry):
    class NoRelu(FakeDeviceProvider):
        @ort.hookimpl
        def ort_create_kernel(self, ep, request):
            if ep.name == self.name and request.node.op_type == "Relu":
                raise ValueError(f"cannot build {request.node.name}")
            return FakeDeviceProvider.ort_create_kernel(self, ep, request)

    ort.register(NoRelu("NoReluExecutionProvider"), "norelu")
    sess = ort.InferenceSession(chain_model(), providers=["NoReluExecutionProvider", CPU])
    relu = next(p for p in sess.get_placement().nodes if p.name == "relu1")
    assert relu.provider == CPU
    assert relu.declined["NoReluExecutionProvider"] == "kernel creation failed: ValueError: cannot build relu1"
    x = np.ones((1, 4), np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], chain_expected(x))


def test_session_lifecycle_hooks(host, fake):
    sess = ort.InferenceSession(chain_model(), providers=[FAKE, CPU])
    assert fake.session_events == ["start"]
    del sess
    import gc

    gc.collect()
    assert fake.session_events == ["start", "end"]


def test_memory_stats_report_peak_bytes_per_device(host, fake):
    sess = ort.InferenceSession(chain_model(), providers=[FAKE, CPU])
    sess.run(None, {"x": np.ones((256, 4), np.float32)})
    stats = sess.get_memory_stats()
    assert stats["Cpu"]["peak_bytes"] >= 256 * 4 * 4
    assert stats["Fake:0"]["peak_bytes"] >= 256 * 4 * 4


def test_unsupported_op_names_op_domain_opset_and_providers(host):
    model = make_model(
        [helper.make_node("Frobnicate", ["x"], ["y"], name="frob", domain="com.example")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model.opset_import.append(helper.make_opsetid("com.example", 3))
    with pytest.raises(ort.NotImplemented) as info:
        ort.InferenceSession(model, providers=[CPU])
    text = str(info.value)
    for part in ("'frob'", "op Frobnicate", "domain com.example", "opset 3", "providers asked: CPUExecutionProvider"):
        assert part in text


def test_host_test_provider_is_not_touched_by_other_plugins(registry):
    host = HostProvider()
    ort.register(host)
    assert ort.get_available_providers() == [CPU]


def test_placement_summary_counts_nodes_ops_and_copies(host, fake):
    sess = ort.InferenceSession(chain_model(), providers=[FAKE, CPU])
    assert sess.get_placement().summary().splitlines() == [
        f"{FAKE}: 3/5 nodes (Relu x2, Add x1)",
        f"{CPU}: 2/5 nodes (Mul x1, Sub x1)",
        "device copies: 4",
    ]
