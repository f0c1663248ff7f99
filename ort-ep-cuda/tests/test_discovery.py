"""Discovery: each way the provider can be unusable gives a reason that says which and what to
install; a GPU is described in the device metadata. The driver and CuPy are replaced by FAKES
(``FakeDriver``, ``FakeCupy``) so that every case runs on any machine."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys

import pytest

from conftest import ON_GPU
from ort_ep_cuda import devices


class FakeDriver:
    """A FAKE libcuda: cuInit's return code, the device count and the driver version."""

    def __init__(self, init_rc: int = 0, count: int = 1, version: int = 12040):
        self.init_rc, self.count, self.version = init_rc, count, version

    def cuInit(self, flags):  # noqa: N802 - the driver's name
        return self.init_rc

    def cuDeviceGetCount(self, out):  # noqa: N802
        ctypes.cast(out, ctypes.POINTER(ctypes.c_int)).contents.value = self.count
        return 0

    def cuDriverGetVersion(self, out):  # noqa: N802
        ctypes.cast(out, ctypes.POINTER(ctypes.c_int)).contents.value = self.version
        return 0


class FakeCupy:
    """A FAKE cupy module: the runtime calls discovery makes."""

    __version__ = "14.2.0"

    def __init__(self, names=("NVIDIA H100",), runtime_version=12040, driver_version=12040):
        outer = self

        class Runtime:
            def runtimeGetVersion(self):  # noqa: N802
                return runtime_version

            def driverGetVersion(self):  # noqa: N802
                return driver_version

            def getDeviceCount(self):  # noqa: N802
                return len(outer.names)

            def getDeviceProperties(self, i):  # noqa: N802
                return {"name": outer.names[i].encode(), "major": 9, "minor": 0, "totalGlobalMem": 80 << 30}

        self.names = names
        self.cuda = type("cuda", (), {"runtime": Runtime()})()


def _no_driver():
    raise OSError("libcuda.so.1: cannot open shared object file: No such file or directory")


def _no_cupy():
    raise ImportError("No module named 'cupy'")


def _cudnn_ok():
    return "91600", ""


def test_no_driver_says_so_and_what_to_install():
    probe = devices.probe_with(_no_driver, _no_cupy, _cudnn_ok)
    assert probe.records == ()
    assert probe.reason.startswith("no NVIDIA driver")
    assert "libcuda.so.1" in probe.reason and "install the NVIDIA driver" in probe.reason


def test_driver_without_gpu_says_no_gpu():
    probe = devices.probe_with(lambda: FakeDriver(init_rc=100), _no_cupy, _cudnn_ok)
    assert probe.reason.startswith("no NVIDIA GPU") and "CUDA_ERROR_NO_DEVICE" in probe.reason
    probe = devices.probe_with(lambda: FakeDriver(count=0), _no_cupy, _cudnn_ok)
    assert probe.reason.startswith("no NVIDIA GPU") and "0 devices" in probe.reason


def test_gpu_without_cupy_says_which_wheel():
    probe = devices.probe_with(FakeDriver, _no_cupy, _cudnn_ok)
    assert "CuPy cannot be imported" in probe.reason
    assert "ort-ep-cuda[cuda12]" in probe.reason and "ort-ep-cuda[cuda13]" in probe.reason


def test_cupy_built_for_a_newer_cuda_than_the_driver():
    probe = devices.probe_with(lambda: FakeDriver(version=12020),
                               lambda: FakeCupy(runtime_version=13000, driver_version=12020), _cudnn_ok)
    assert probe.records == ()
    assert "supports CUDA 12.2 but CuPy was built for CUDA 13.0" in probe.reason


def test_cupy_built_for_a_newer_minor_cuda_than_the_driver_is_usable():
    """CUDA's minor-version compatibility (seen on the H200: CuPy's CUDA 13.2 build, a 13.0 driver)."""
    probe = devices.probe_with(lambda: FakeDriver(version=13000),
                               lambda: FakeCupy(runtime_version=13020, driver_version=13000), _cudnn_ok)
    assert probe.reason is None and len(probe.records) >= 1


def test_gpus_are_listed_with_metadata():
    probe = devices.probe_with(FakeDriver, lambda: FakeCupy(names=("NVIDIA H100", "NVIDIA L4")), _cudnn_ok)
    assert probe.reason is None
    assert [r.name for r in probe.records] == ["NVIDIA H100", "NVIDIA L4"]
    meta = devices.metadata(probe.records[1])
    assert meta["compute_capability"] == "9.0"
    assert meta["total_memory_bytes"] == str(80 << 30)
    assert meta["driver_cuda_version"] == "12.4" and meta["runtime_cuda_version"] == "12.4"
    assert meta["cupy"] == "14.2.0" and meta["cudnn"] == "91600"


def test_missing_cudnn_is_metadata_and_declines_convolutions_only():
    probe = devices.probe_with(FakeDriver, FakeCupy, lambda: ("", "cudnn-frontend cannot be used (x); pip install y"))
    assert probe.records and probe.records[0].cudnn == ""
    assert devices.metadata(probe.records[0])["cudnn"].startswith("unavailable: cudnn-frontend cannot be used")


SCRIPT = r"""
import json
import ort_core as ort
from ort_core.testing import models
result = {"available": ort.get_available_providers(), "installed": list(ort.registry().providers()),
          "reason": ort.registry().devices("CUDAExecutionProvider").unavailable_reason}
model = models.mlp(in_features=8, hidden=8, layers=1)
session = ort.InferenceSession(model, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
result["session_providers"] = session.get_providers()
result["output_shape"] = list(session.run(None, models.random_inputs(model))[0].shape)
print("RESULT " + json.dumps(result))
"""


@pytest.mark.skipif(ON_GPU, reason="this machine has a GPU")
def test_this_machine_reports_not_usable_and_cpu_still_runs():
    """No fake here: the real discovery on a machine without an NVIDIA driver (CI)."""
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    assert "CUDAExecutionProvider" in result["installed"]
    assert "CUDAExecutionProvider" not in result["available"]
    assert result["reason"].startswith(("no NVIDIA driver", "no NVIDIA GPU", "CuPy cannot be imported"))
    assert result["session_providers"] == ["CPUExecutionProvider"]
    assert result["output_shape"] == [1, 10]
    cli = subprocess.run([sys.executable, "-m", "ort_core.cli", "providers"], capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr
    assert "CUDAExecutionProvider" in cli.stdout and result["reason"][:40] in cli.stdout
