"""Provider selection by device: fixed policies, the delegate, MAX_PERFORMANCE measured (bounded,
cached by model hash, reported), and onnxruntime's creation fallback."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from context_provider import ContextCompilerProvider

import ort_core as ort
from conftest import chain_expected, chain_model
from fake_providers import FakeDeviceProvider, HostProvider
from ort_core import hookimpl, policy

CPU = "CPUExecutionProvider"
FAKE = "FakeDeviceExecutionProvider"
X = np.array([[1.0, -2.0, 0.5, 3.0], [-1.0, 2.0, -0.5, 0.25]], np.float32)
P = ort.OrtExecutionProviderDevicePolicy


class SlowHost(HostProvider):
    """A host provider whose every kernel sleeps ``delay`` seconds: a placement that is slower
    by construction, so the test checks the choice, not anyone's speed."""

    def __init__(self, name: str, delay: float):
        super().__init__(name)
        self.delay = delay
        self.sessions = 0

    @hookimpl
    def ort_session_start(self, ep):
        if ep.name == self.name:
            self.sessions += 1

    @hookimpl
    def ort_create_kernel(self, ep, request):
        if ep.name != self.name:
            return None
        kernel = super().ort_create_kernel(ep, request)
        inner = kernel.run

        def run(*xs):
            time.sleep(self.delay)
            return inner(*xs)

        return ort.Kernel(run=run, single_output=True)


@pytest.fixture(autouse=True)
def fresh_cache():
    policy.clear_cache()
    yield
    policy.clear_cache()


def _policy(p, **entries) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.set_provider_selection_policy(p)
    for k, v in entries.items():
        so.add_session_config_entry(k, v)
    return so


def test_prefer_gpu_takes_a_hardware_gpu_and_reports_it(host, fake):
    sess = ort.InferenceSession(chain_model(), _policy(P.PREFER_GPU))
    assert sess.get_providers() == [FAKE, CPU]
    selection = sess.get_placement().selection
    assert selection.policy == "PREFER_GPU" and selection.chosen == [FAKE, CPU]
    assert "PREFER_GPU chose FakeDeviceExecutionProvider (GPU 'Fake GPU')" in str(sess.get_placement())
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], chain_expected(X), rtol=1e-6)


def test_prefer_cpu_and_default(host, fake):
    for p in (P.PREFER_CPU, P.DEFAULT):
        sess = ort.InferenceSession(chain_model(), _policy(p))
        assert sess.get_providers() == [CPU]


def test_prefer_npu_family(host, registry):
    npu = ContextCompilerProvider()
    ort.register(npu, "npu")
    for p in (P.PREFER_NPU, P.MAX_EFFICIENCY, P.MIN_OVERALL_POWER):
        sess = ort.InferenceSession(chain_model(), _policy(p))
        assert sess.get_providers() == ["ContextCompilerExecutionProvider", CPU], p
        assert sess.get_placement().selection.policy == p.name
    # no NPU: the CPU provider
    assert ort.InferenceSession(chain_model(), _policy(P.PREFER_GPU)).get_providers() == [CPU]


def test_software_gpu_is_passed_over(host, registry):
    class Software(FakeDeviceProvider):
        @hookimpl
        def ort_ep_devices(self, provider):
            if provider != self.name:
                return None
            return ort.EpDevices((ort.EpDevice(self.name, "tests", "GPU", "lavapipe-like", memory="Fake:0",
                                               hardware=False),))

    ort.register(Software(), "software")
    assert ort.InferenceSession(chain_model(), _policy(P.PREFER_GPU)).get_providers() == [CPU]


def test_delegate_gets_devices_and_metadata(host, fake):
    seen = {}

    def delegate(devices, model_metadata, runtime_metadata, max_selections):
        seen.update(names=[d.ep_name for d in devices], model=dict(model_metadata),
                    runtime=dict(runtime_metadata), max=max_selections)
        return [d for d in devices if d.ep_name == FAKE]

    model = chain_model()
    model.metadata_props.add(key="author", value="tests")
    so = ort.SessionOptions()
    so.set_provider_selection_policy_delegate(delegate)
    sess = ort.InferenceSession(model, so)
    assert seen["names"] == [CPU, FAKE] and seen["model"] == {"author": "tests"} and seen["max"] == 2
    assert seen["runtime"]["runtime"] == "ort_core"
    assert sess.get_providers() == [FAKE, CPU] and sess.get_placement().selection.policy == "delegate"
    so.set_provider_selection_policy_delegate(lambda *a: [])
    with pytest.raises(ort.EPFail, match="selected no device"):
        ort.InferenceSession(model, so)
    with pytest.raises(ort.InvalidArgument, match="needs a callable"):
        so.set_provider_selection_policy_delegate(3)
    with pytest.raises(ort.InvalidArgument, match="MAX_PERFORMANCE"):
        so.set_provider_selection_policy(42)


def test_add_provider_for_devices_checks_its_devices(host, fake):
    so = ort.SessionOptions()
    with pytest.raises(ort.InvalidArgument, match="devices of one provider"):
        so.add_provider_for_devices(ort.get_ep_devices())
    with pytest.raises(ort.InvalidArgument, match="OrtEpDevice"):
        so.add_provider_for_devices(["CPU"])
    fake_devices = [d for d in ort.get_ep_devices() if d.ep_name == FAKE]
    so.add_provider_for_devices(fake_devices, {"device_id": "0"})
    sess = ort.InferenceSession(chain_model(), so)
    assert sess.get_providers() == [FAKE, CPU]


def test_max_performance_measures_and_keeps_the_faster(registry, tmp_path):
    fast = HostProvider(CPU)
    slow = SlowHost("SlowExecutionProvider", delay=0.01)
    ort.register(fast, "fast")
    ort.register(slow, "slow")
    cache = tmp_path / "choices.json"
    so = _policy(P.MAX_PERFORMANCE, **{policy.CACHE_FILE: str(cache), policy.BUDGET_MS: "2000"})
    sess = ort.InferenceSession(chain_model(), so)
    assert sess.get_providers() == [CPU]
    selection = sess.get_placement().selection
    assert selection.policy == "MAX_PERFORMANCE" and not selection.cached
    timed = {tuple(m.providers): m for m in selection.measurements}
    assert set(timed) == {("SlowExecutionProvider", CPU), (CPU,)}
    assert timed[("SlowExecutionProvider", CPU)].ms_per_run > timed[(CPU,)].ms_per_run
    assert all(m.runs >= 1 and m.status == "ok" for m in timed.values())
    assert "measurement took" in str(sess.get_placement())
    # the next session reads the choice: no candidate session is made
    starts = slow.sessions
    policy.clear_cache()  # the file alone must answer
    again = ort.InferenceSession(chain_model(), so)
    assert slow.sessions == starts and again.get_placement().selection.cached
    assert again.get_providers() == [CPU]
    stored = json.loads(cache.read_text())
    assert len(stored) == 1 and next(iter(stored.values()))["chosen"] == [CPU]


def test_max_performance_budget_bounds_the_measurement(registry):
    ort.register(HostProvider(CPU), "fast")
    ort.register(SlowHost("SlowExecutionProvider", delay=0.05), "slow")
    so = _policy(P.MAX_PERFORMANCE, **{policy.BUDGET_MS: "1"})
    sess = ort.InferenceSession(chain_model(), so)
    selection = sess.get_placement().selection
    statuses = [m.status for m in selection.measurements]
    assert statuses[0] == "ok" and statuses[1:] == ["not measured: budget spent"]
    assert selection.measurements[0].runs == 1
    assert sess.get_providers() == ["SlowExecutionProvider", CPU]  # the only one measured


def test_measuring_an_explicit_provider_list(registry):
    ort.register(HostProvider(CPU), "fast")
    ort.register(SlowHost("SlowExecutionProvider", delay=0.01), "slow")
    so = ort.SessionOptions()
    so.add_session_config_entry(policy.MEASURE, "1")
    sess = ort.InferenceSession(chain_model(), so, providers=["SlowExecutionProvider", CPU])
    assert sess.get_providers() == [CPU]
    assert [m.providers for m in sess.get_placement().selection.measurements] == [["SlowExecutionProvider", CPU], [CPU]]


def test_creation_fallback_to_the_cpu_provider(host, registry):
    class Failing(FakeDeviceProvider):
        @hookimpl
        def ort_session_start(self, ep):
            if ep.name == self.name:
                raise ort.EPFail("the device is busy")

    ort.register(Failing(), "failing")
    with pytest.warns(UserWarning, match="EP Error .*the device is busy.*falling back"):
        sess = ort.InferenceSession(chain_model(), providers=[FAKE, CPU])
    assert sess.get_providers() == [CPU]
    with pytest.raises(ort.EPFail, match="the device is busy"):
        ort.InferenceSession(chain_model(), providers=[FAKE, CPU], enable_fallback=0)
    sess.disable_fallback()
    with pytest.raises(ort.EPFail, match="the device is busy"):
        sess.set_providers([FAKE, CPU])
    strict = ort.SessionOptions()
    strict.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    with pytest.raises(ort.EPFail, match="the device is busy"):
        ort.InferenceSession(chain_model(), strict, providers=[FAKE, CPU])


def test_set_providers_moves_the_session(host, fake):
    sess = ort.InferenceSession(chain_model(), providers=[CPU])
    assert sess.get_placement().counts() == {CPU: 5}
    sess.set_providers([FAKE, CPU])
    assert sess.get_providers() == [FAKE, CPU]
    assert sess.get_placement().counts()[FAKE] == 3
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], chain_expected(X), rtol=1e-6)
    assert fake.session_events == ["start"]
    sess.set_providers([CPU])
    assert fake.session_events == ["start", "end"]
