"""The compiled paths come with a default install, and the CPU device says which run here.

``pip install ort-ep-cpu`` brings numba and (Linux x86-64) oneDNN as ordinary dependencies with
environment markers; ``ORT_EP_CPU_NUMBA=0`` / ``ORT_EP_CPU_ONEDNN=0`` select the numpy paths.
``ort-core providers`` prints the device metadata checked here.
"""

from __future__ import annotations

import platform
import sys
from importlib import metadata, util

import pytest
from packaging.requirements import Requirement

from ort_ep_cpu import plugin
from ort_ep_cpu.kernels import _jit, _onednn


def _default_requirements() -> dict[str, Requirement]:
    reqs = [Requirement(r) for r in metadata.requires("ort-ep-cpu") or []]
    return {r.name: r for r in reqs if r.marker is None or "extra" not in str(r.marker)}


def test_numba_and_onednn_are_default_dependencies_with_markers():
    reqs = _default_requirements()
    assert "numba" in reqs and "onednn-cpu-gomp" in reqs
    onednn = reqs["onednn-cpu-gomp"].marker
    assert onednn.evaluate({"sys_platform": "linux", "platform_machine": "x86_64"})
    assert not onednn.evaluate({"sys_platform": "darwin", "platform_machine": "arm64"})
    assert not onednn.evaluate({"sys_platform": "linux", "platform_machine": "aarch64"})
    numba = reqs["numba"].marker
    assert numba.evaluate({"platform_python_implementation": "CPython", "platform_machine": "aarch64"})
    assert not numba.evaluate({"platform_python_implementation": "PyPy", "platform_machine": "x86_64"})


@pytest.mark.skipif(sys.platform != "linux" or platform.machine() != "x86_64", reason="the defaults install on Linux x86-64")
def test_a_default_install_here_runs_both_compiled_paths():
    (device,) = plugin.ort_ep_devices("CPUExecutionProvider").devices
    assert device.metadata["numba"] == metadata.version("numba")
    assert device.metadata["onednn"] == _onednn.library().version


def test_the_device_says_how_to_get_a_missing_path(monkeypatch):
    monkeypatch.setattr(_jit, "_tried", False)
    monkeypatch.setattr(util, "find_spec", lambda name, *a: None if name == "numba" else object())
    monkeypatch.setattr(_onednn, "_tried", False)
    monkeypatch.setattr(_onednn, "_library", None)
    monkeypatch.setattr(_onednn, "_find", lambda: None)
    monkeypatch.setattr(_onednn, "_problem", None)
    (device,) = plugin.ort_ep_devices("CPUExecutionProvider").devices
    assert device.metadata["numba"] == "not used (numba is not installed: pip install numba)"
    assert device.metadata["onednn"] == (
        "not used (the onednn-cpu-gomp distribution is not installed: pip install onednn-cpu-gomp (Linux x86-64))")


def test_the_numpy_only_path_is_selectable(monkeypatch):
    monkeypatch.setattr(_jit, "USE", False)
    monkeypatch.setattr(_onednn, "USE", False)
    assert not _jit.enabled() and _onednn.library() is None
    (device,) = plugin.ort_ep_devices("CPUExecutionProvider").devices
    assert device.metadata["numba"] == "not used (switched off (ORT_EP_CPU_NUMBA=0))"
    assert device.metadata["onednn"] == "not used (switched off (ORT_EP_CPU_ONEDNN=0))"
