"""onnxruntime's device-era API, checked as a user moving from onnxruntime meets it.

Every check that onnxruntime can pass runs against both modules (``ort`` is onnxruntime or
ort_core): ``import ort_core as ort`` must pass every one onnxruntime passes. For ort_core the
CPU provider is the onnxruntime-backed stand-in of ``conftest.ort_nodes`` (ort-core's test venv
has no real provider), so the numbers come out of the same kernels. Checks of ort_core's own
behaviour beyond onnxruntime's (install hints, typo errors, strict mode) run on ort_core only.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from conftest import chain_expected, chain_model

CPU = "CPUExecutionProvider"
X = np.array([[1.0, -2.0, 0.5, 3.0], [-1.0, 2.0, -0.5, 0.25]], np.float32)




def require(ort, *names: str) -> None:
    """Skip on an onnxruntime too old for the feature (the device API came with 1.22+)."""
    missing = [n for n in names if not _has(ort, n)]
    if missing:
        pytest.skip(f"{ort.__name__} {getattr(ort, '__version__', '')} has no {', '.join(missing)}")


def _has(ort, dotted: str) -> bool:
    obj = ort
    for part in dotted.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


@pytest.fixture
def ort_core_only(ort_nodes):
    import ort_core

    return ort_core


def _bytes(model: onnx.ModelProto) -> bytes:
    return model.SerializeToString()


# ------------------------------------------------------------------ missing providers
def test_missing_provider_warns_and_runs_on_the_rest(ort):
    with pytest.warns(UserWarning, match="CUDAExecutionProvider"):
        sess = ort.InferenceSession(_bytes(chain_model()), providers=["CUDAExecutionProvider", CPU])
    assert sess.get_providers() == [CPU]
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], chain_expected(X), rtol=1e-6)


def test_missing_provider_warning_says_what_to_install(ort_core_only):
    ort = ort_core_only
    for name, package in [("CUDAExecutionProvider", "ort-ep-cuda"), ("TensorrtExecutionProvider", "ort-ep-tensorrt"),
                          ("QNNExecutionProvider", "ort-ep-qnn"), ("CoreMLExecutionProvider", "ort-ep-coreml"),
                          ("OpenVINOExecutionProvider", "ort-ep-openvino"), ("WebGpuExecutionProvider", "ort-ep-webgpu")]:
        with pytest.warns(UserWarning, match=f"pip install {package}"):
            ort.InferenceSession(chain_model(), providers=[name, CPU])
    # another provider's name: warned, no package to suggest
    with pytest.warns(UserWarning, match="'AcmeExecutionProvider' is not installed; available") as record:
        ort.InferenceSession(chain_model(), providers=["AcmeExecutionProvider"])
    assert "pip install" not in str(record[0].message)


def test_missing_provider_in_strict_mode_is_an_error(ort_core_only):
    ort = ort_core_only
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    with pytest.raises(ort.NoSuchProvider, match="CUDAExecutionProvider.*pip install ort-ep-cuda.*disable_cpu_ep_fallback"):
        ort.InferenceSession(chain_model(), so, providers=["CUDAExecutionProvider", CPU])


def test_typo_of_an_installed_provider_is_an_error_naming_it(ort_core_only):
    ort = ort_core_only
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for typo in ("CPUExecutionProviderr", "CpuExecutionProvider", "CPUExecutonProvider"):
            with pytest.raises(ort.NoSuchProvider, match=f"unknown provider '{typo}'; did you mean 'CPUExecutionProvider'"):
                ort.InferenceSession(chain_model(), providers=[typo])
        with pytest.raises(ort.NoSuchProvider, match="did you mean 'CUDAExecutionProvider'"):
            ort.InferenceSession(chain_model(), providers=["CudaExecutionProvider"])


# ------------------------------------------------------------------ devices
def test_get_ep_devices_has_onnxruntimes_shape(ort):
    require(ort, "get_ep_devices", "OrtHardwareDeviceType", "OrtDeviceMemoryType")
    devices = ort.get_ep_devices()
    assert devices and any(d.ep_name == CPU for d in devices)
    for d in devices:
        assert isinstance(d.ep_name, str) and isinstance(d.ep_vendor, str)
        assert isinstance(d.ep_metadata, dict) and isinstance(d.ep_options, dict)
        hw = d.device
        assert hw.type in (ort.OrtHardwareDeviceType.CPU, ort.OrtHardwareDeviceType.GPU, ort.OrtHardwareDeviceType.NPU)
        assert isinstance(hw.vendor, str) and isinstance(hw.vendor_id, int) and isinstance(hw.device_id, int)
        assert isinstance(hw.metadata, dict)
        d.memory_info(ort.OrtDeviceMemoryType.DEFAULT)  # None for the CPU in both
    cpu = next(d for d in devices if d.ep_name == CPU)
    assert cpu.device.type == ort.OrtHardwareDeviceType.CPU
    assert cpu.memory_info(ort.OrtDeviceMemoryType.DEFAULT) is None


# ------------------------------------------------------------------ the small surface
def test_set_providers_rebuilds_the_session(ort):
    require(ort, "InferenceSession.set_providers")
    sess = ort.InferenceSession(_bytes(chain_model()), providers=[CPU])
    sess.set_providers([CPU])
    assert sess.get_providers() == [CPU]
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], chain_expected(X), rtol=1e-6)
    with pytest.warns(UserWarning, match="CUDAExecutionProvider"):
        sess.set_providers(["CUDAExecutionProvider", CPU])
    assert sess.get_providers() == [CPU]


def test_fallback_switches(ort):
    sess = ort.InferenceSession(_bytes(chain_model()), providers=[CPU])
    sess.disable_fallback()
    sess.enable_fallback()
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], chain_expected(X), rtol=1e-6)


def test_get_build_info(ort):
    require(ort, "get_build_info")
    info = ort.get_build_info()
    assert isinstance(info, str) and info


def test_set_seed_accepts_an_int(ort):
    require(ort, "set_seed")
    ort.set_seed(1234)


def test_provider_graph_assignment_info(ort):
    require(ort, "InferenceSession.get_provider_graph_assignment_info")
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    sess = ort.InferenceSession(_bytes(chain_model()), so, providers=[CPU])
    subgraphs = sess.get_provider_graph_assignment_info()
    assert subgraphs and all(s.ep_name == CPU for s in subgraphs)
    nodes = [n for s in subgraphs for n in s.get_nodes()]
    assert sorted(n.name for n in nodes) == ["add", "mul", "relu1", "relu2", "sub"]
    assert {n.name: n.op_type for n in nodes}["relu1"] == "Relu"
    assert all(n.domain == "" for n in nodes)


def test_assignment_info_needs_the_config_entry(ort):
    require(ort, "InferenceSession.get_provider_graph_assignment_info")
    sess = ort.InferenceSession(_bytes(chain_model()), providers=[CPU])
    with pytest.raises(Exception, match="record_ep_graph_assignment_info"):
        sess.get_provider_graph_assignment_info()


# ------------------------------------------------------------------ DLPack
def test_ortvalue_dlpack_round_trip_without_copy(ort):
    require(ort, "OrtValue.from_dlpack", "OrtValue.__dlpack__")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    value = ort.OrtValue.ortvalue_from_numpy(x)
    assert value.__dlpack_device__() == (1, 0)  # kDLCPU, device 0
    view = np.from_dlpack(value)
    np.testing.assert_array_equal(view, x)
    back = ort.OrtValue.from_dlpack(np.ascontiguousarray(x).__dlpack__())
    np.testing.assert_array_equal(back.numpy(), x)
    assert back.shape() == [3, 4]


def test_ortvalue_from_dlpack_shares_host_memory(ort_core_only):
    ort = ort_core_only
    x = np.zeros((2, 3), np.float32)
    value = ort.OrtValue.from_dlpack(x)
    x[0, 0] = 5.0
    assert value.numpy()[0, 0] == 5.0  # no copy
    view = np.from_dlpack(value)
    assert np.shares_memory(view, x)


# ------------------------------------------------------------------ providers by device
def test_add_provider_and_policy_run(ort):
    require(ort, "SessionOptions.add_provider", "OrtExecutionProviderDevicePolicy")
    so = ort.SessionOptions()
    so.add_provider(CPU, {})
    sess = ort.InferenceSession(_bytes(chain_model()), so)
    assert sess.get_providers()[0] == CPU
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], chain_expected(X), rtol=1e-6)
    for policy in ("DEFAULT", "PREFER_CPU", "PREFER_GPU", "PREFER_NPU", "MAX_EFFICIENCY", "MIN_OVERALL_POWER"):
        so = ort.SessionOptions()
        so.set_provider_selection_policy(getattr(ort.OrtExecutionProviderDevicePolicy, policy))
        sess = ort.InferenceSession(_bytes(chain_model()), so)
        assert CPU in sess.get_providers(), policy
        np.testing.assert_allclose(sess.run(None, {"x": X})[0], chain_expected(X), rtol=1e-6)


def test_add_provider_for_devices(ort):
    require(ort, "SessionOptions.add_provider_for_devices", "get_ep_devices")
    cpu = [d for d in ort.get_ep_devices() if d.ep_name == CPU]
    so = ort.SessionOptions()
    so.add_provider_for_devices(cpu, {})
    sess = ort.InferenceSession(_bytes(chain_model()), so)
    assert sess.get_providers()[0] == CPU
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], chain_expected(X), rtol=1e-6)


def test_selection_policy_delegate(ort):
    require(ort, "SessionOptions.set_provider_selection_policy_delegate")
    calls = []

    def delegate(ep_devices, model_metadata, runtime_metadata, max_selections):
        calls.append((len(ep_devices), dict(model_metadata), max_selections))
        return [d for d in ep_devices if d.ep_name == CPU][:1]

    model = chain_model()
    helper.set_model_props(model, {"purpose": "tests"})
    so = ort.SessionOptions()
    so.set_provider_selection_policy_delegate(delegate)
    sess = ort.InferenceSession(_bytes(model), so)
    assert calls and calls[0][0] >= 1 and calls[0][2] >= 1
    assert sess.get_providers()[0] == CPU
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], chain_expected(X), rtol=1e-6)


def test_random_op_model_runs(ort):
    node = helper.make_node("RandomUniform", [], ["y"], shape=[3], dtype=TensorProto.FLOAT)
    graph = helper.make_graph([node], "r", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    sess = ort.InferenceSession(_bytes(model), providers=[CPU])
    (y,) = sess.run(None, {})
    assert y.shape == (3,) and np.all((y >= 0) & (y < 1))


def test_host_cpu_reads_the_flags_proc_cpuinfo_lists():
    """Providers decide by CPU features (OpenVINO's 8-bit decline without VNNI) from
    ``host_cpu().flags``, read in the same pass as the name and vendor."""
    import os

    from ort_core.devices import host_cpu

    if not os.path.exists("/proc/cpuinfo"):
        pytest.skip("no /proc/cpuinfo here: the flags are empty")
    with open("/proc/cpuinfo") as f:
        line = next((line for line in f if line.startswith("flags")), None)
    if line is None:
        pytest.skip("/proc/cpuinfo lists no flags on this CPU")
    assert host_cpu().flags == frozenset(line.split(":", 1)[1].split())
