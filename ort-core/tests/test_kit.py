"""The conformance kit: it passes a correct provider and catches each kind of broken one.

Providers here are written in the test and registered in-process (``require_entry_point`` is
off); ``fake_providers.HostProvider`` stands in for the CPU provider as fallback.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import ort_core
from fake_providers import HostProvider
from ort_core import (
    Capability,
    Claim,
    DataTransfer,
    EpDevice,
    EpDevices,
    HostAllocator,
    Kernel,
    MemoryInfo,
    OptionSpec,
    ProviderSpec,
    hookimpl,
)
from ort_core.testing.kit import CHECKS, Kit, KitConfig

KERNELS = {"Add": np.add, "Mul": np.multiply, "Relu": lambda x: np.maximum(x, x.dtype.type(0))}


class DevTensor:
    """A tensor in the test provider's own memory: kernels unwrap it, numpy cannot."""

    def __init__(self, data: np.ndarray) -> None:
        self.data = np.array(data, copy=True)
        self.shape, self.dtype, self.nbytes = self.data.shape, self.data.dtype, self.data.nbytes


class Pool(HostAllocator):
    """An allocator with a limit, counters and 256-byte alignment in "Kit:0" memory."""

    def __init__(self, limit: int | None) -> None:
        super().__init__(256, limit, MemoryInfo("Kit:0", "GPU", 0, 256))


class LimitIgnoringPool(Pool):
    """Reports a limit in its statistics but never enforces it: the kit must catch that."""

    def _over_limit(self, nbytes: int) -> bool:
        return False


class DeviceProvider:
    """A correct device provider: Add/Mul/Relu on float32 in "Kit:0" memory. Subclasses break
    one thing each."""

    name = "KitDeviceExecutionProvider"
    options = (OptionSpec("mem_limit", 0, "allocator limit in bytes (0: none)", int),)

    @hookimpl
    def ort_register_providers(self) -> list[ProviderSpec]:
        return [ProviderSpec(self.name, "1.0.0", "tests", "kernel", options=self.options)]

    @hookimpl
    def ort_ep_devices(self, provider: str) -> EpDevices | None:
        if provider != self.name:
            return None
        return EpDevices((EpDevice(self.name, "tests", "GPU", "kit device", memory="Kit:0"),))

    @hookimpl
    def ort_get_capability(self, ep, graph, candidates) -> Capability | None:
        if ep.name != self.name:
            return None
        cap = Capability()
        for i in sorted(candidates):
            node = graph.nodes[i]
            dtypes = {graph.value(n).dtype for n in (*node.inputs, *node.outputs) if n}
            if node.op_type in KERNELS and not node.domain and node.opset >= 7 and dtypes == {np.dtype(np.float32)}:
                cap.claims.append(Claim((i,)))
            else:
                cap.declined[i] = f"{node.op_type}: not a float32 Add/Mul/Relu"
        return cap

    @hookimpl
    def ort_create_allocator(self, ep) -> Pool | None:
        return Pool(ep.options["mem_limit"] or None) if ep.name == self.name else None

    @hookimpl
    def ort_create_data_transfer(self, ep) -> DataTransfer | None:
        if ep.name != self.name:
            return None
        return DataTransfer(to_device=DevTensor, to_host=lambda t: np.array(t.data, copy=True))

    def compute(self, op: str, *arrays: np.ndarray) -> np.ndarray:
        return KERNELS[op](*arrays)

    @hookimpl
    def ort_create_kernel(self, ep, request) -> Kernel | None:
        if ep.name != self.name:
            return None
        op = request.node.op_type
        return Kernel(run=lambda *xs: DevTensor(self.compute(op, *(x.data for x in xs))), single_output=True)


def _kit(provider: Any, registry: Any, **config: Any) -> Kit:
    assert ort_core.register(HostProvider(), "host-cpu")  # the fallback
    assert ort_core.register(provider, provider.name)
    return Kit(KitConfig(provider.name, require_entry_point=False, **config))


def test_a_correct_device_provider_passes(registry: Any, tmp_path: Any) -> None:
    kit = _kit(DeviceProvider(), registry, ops=frozenset({"Add", "Relu", "Mul"}), max_cases=40)
    card = kit.run_all()
    assert [c.name for c in card.checks] == list(CHECKS)
    failed = {c.name: (c.message, c.details) for c in card.checks if c.status == "failed"}
    assert not failed, failed
    for name in ("allocator", "data_transfer", "node_cases", "partial_placement", "concurrency", "bad_inputs"):
        assert card.result(name).status == "passed", (name, card.result(name).message)
    assert "limit honoured" in card.result("allocator").message
    assert card.node_cases.claimed > 0 and card.node_cases.passed == card.node_cases.claimed
    card.save(tmp_path / "card.json")
    saved = json.loads((tmp_path / "card.json").read_text())
    assert saved["summary"]["checks_failed"] == 0
    assert saved["summary"]["node_cases_claimed"] == card.node_cases.claimed


def test_in_process_registration_fails_the_entry_point_rule(registry: Any) -> None:
    assert ort_core.register(DeviceProvider(), "dev")
    result = Kit(KitConfig(DeviceProvider.name)).run("registration")
    assert result.status == "failed" and "entry point" in result.message


def test_missing_provider_fails_registration_and_skips_the_rest(registry: Any) -> None:
    kit = Kit(KitConfig("NoSuchExecutionProvider", require_entry_point=False))
    card = kit.run_all()
    assert card.result("registration").status == "failed"
    assert all(card.result(c).status == "skipped" for c in CHECKS[1:])


class BadClaims(DeviceProvider):
    @hookimpl
    def ort_get_capability(self, ep, graph, candidates) -> Capability | None:
        if ep.name != self.name:
            return None
        ordered = sorted(candidates)
        outside = next((i for i in range(len(graph.nodes)) if i not in candidates), None)
        claims = [Claim((ordered[0],)), Claim((ordered[0],))]  # claimed twice; the rest has no reason
        if outside is not None:
            claims.append(Claim((outside,)))
        return Capability(claims=claims)


def test_capability_problems_are_named(registry: Any) -> None:
    result = _kit(BadClaims(), registry).run("capability")
    assert result.status == "failed"
    text = "\n".join(result.details)
    assert "claimed nodes twice" in text
    assert "not candidates" in text
    assert "neither claimed nor given a reason" in text


class LossyTransfer(DeviceProvider):
    @hookimpl
    def ort_create_data_transfer(self, ep) -> DataTransfer | None:
        if ep.name != self.name:
            return None
        # goes through float16 on the way back, as a careless half-precision staging buffer would
        return DataTransfer(to_device=DevTensor, to_host=lambda t: t.data.astype(np.float16).astype(t.dtype))


def test_lossy_copies_are_caught(registry: Any) -> None:
    result = _kit(LossyTransfer(), registry).run("data_transfer")
    assert result.status == "failed"
    assert any("bytes changed" in d for d in result.details)


class LeakyLimit(DeviceProvider):
    @hookimpl
    def ort_create_allocator(self, ep) -> Pool | None:
        return LimitIgnoringPool(ep.options["mem_limit"] or None) if ep.name == self.name else None


def test_an_ignored_memory_limit_is_caught(registry: Any) -> None:
    result = _kit(LeakyLimit(), registry).run("allocator")
    assert result.status == "failed"
    assert any("were granted" in d for d in result.details)


class WrongAdd(DeviceProvider):
    def compute(self, op: str, *arrays: np.ndarray) -> np.ndarray:
        return np.subtract(*arrays) if op == "Add" else super().compute(op, *arrays)


def test_wrong_kernel_results_fail_node_cases(registry: Any) -> None:
    kit = _kit(WrongAdd(), registry, ops=frozenset({"Add"}), max_cases=10)
    result = kit.run("node_cases")
    assert result.status == "failed"
    assert kit.scorecard.node_cases.failures
    assert all(name.startswith("test_add") for name in kit.scorecard.node_cases.failures)


class RaisingDevices(DeviceProvider):
    @hookimpl
    def ort_ep_devices(self, provider: str) -> EpDevices | None:
        raise RuntimeError("driver exploded")


def test_a_raising_device_query_fails(registry: Any) -> None:
    result = _kit(RaisingDevices(), registry).run("devices")
    assert result.status == "failed" and "driver exploded" in result.details[0]


class Unavailable(DeviceProvider):
    @hookimpl
    def ort_ep_devices(self, provider: str) -> EpDevices | None:
        return EpDevices((), "no kit device here: plug one in") if provider == self.name else None


def test_unavailable_provider_skips_hardware_checks_with_its_reason(registry: Any) -> None:
    card = _kit(Unavailable(), registry).run_all()
    assert card.result("devices").status == "passed"
    assert card.result("options").status == "passed"  # options are validated before devices
    for name in ("capability", "allocator", "data_transfer", "node_cases", "concurrency"):
        result = card.result(name)
        assert result.status == "skipped" and "plug one in" in result.message, name


class BoolOption(DeviceProvider):
    options = (OptionSpec("fast", False, "go fast", bool),)  # bool("False") is True


def test_option_that_does_not_parse_its_own_default_is_caught(registry: Any) -> None:
    result = _kit(BoolOption(), registry).run("options")
    assert result.status == "failed"
    assert any("'False' parses to True" in d for d in result.details)


class Misspelt(DeviceProvider):
    @hookimpl
    def ort_get_capabilty(self, ep, graph, candidates) -> None:  # the typo is the test
        return None


def test_misspelt_hook_is_named(registry: Any) -> None:
    # pluggy accepts unknown hook names at registration; only the kit notices
    result = _kit(Misspelt(), registry).run("registration")
    assert result.status == "failed"
    assert any("did you mean ort_get_capability" in d for d in result.details)


def test_unknown_check_name_lists_the_checks(registry: Any) -> None:
    with pytest.raises(KeyError, match="registration"):
        Kit(KitConfig("X")).run("speed")


class ActivationDroppingGemm(HostProvider):
    """Claims com.microsoft FusedGemm and computes the Gemm without its activation, as
    OpenVINO's frontend did with Tanh; ``declare`` also lists it in ``fused_ops``."""

    def __init__(self, declare: bool) -> None:
        super().__init__("KitFusedExecutionProvider")
        self.fused_ops = (ort_core.FusedOp("FusedGemm"),) if declare else ()

    @hookimpl
    def ort_get_capability(self, ep, graph, candidates) -> Capability | None:
        if ep.name != self.name:
            return None
        cap = Capability()
        for i in sorted(candidates):
            node = graph.nodes[i]
            if (node.domain, node.op_type) == ("com.microsoft", "FusedGemm"):
                cap.claims.append(Claim((i,)))
            else:
                cap.declined[i] = f"{node.op_type}: only FusedGemm"
        return cap

    @hookimpl
    def ort_create_kernel(self, ep, request) -> Kernel | None:
        if ep.name != self.name:
            return None
        return Kernel(run=lambda x, w, b: x @ w.T + b, single_output=True)  # the activation is dropped


@pytest.mark.parametrize("declare", [False, True])
def test_fusion_parity_catches_a_fused_op_computed_differently(registry: Any, declare: bool) -> None:
    from fake_providers import OnnxruntimeNodeProvider

    provider = ActivationDroppingGemm(declare)
    assert ort_core.register(OnnxruntimeNodeProvider(), "ort-cpu")  # a fallback with every op
    assert ort_core.register(provider, provider.name)
    kit = Kit(KitConfig(provider.name, require_entry_point=False))
    result = kit.run("fusion_parity")
    assert result.status == "failed"
    text = "\n".join(result.details)
    # Relu keeps negative values out only with the activation: every activation differs
    assert "FusedGemm(activation=Tanh) (given): runs on KitFusedExecutionProvider and differs" in text
    assert "decline it in ort_get_capability" in text
    assert ("remove it from ProviderSpec.fused_ops" in text) == declare
    assert kit.scorecard.fusions["FusedGemm(activation=Tanh)"].startswith("declared" if declare else "not declared")
    assert "FusedConv(activation=Relu)" in kit.scorecard.fusions  # every fused op is listed
