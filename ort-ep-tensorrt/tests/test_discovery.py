"""Without a GPU or TensorRT the provider is listed as not usable, saying what is missing."""

from __future__ import annotations

import subprocess
import sys

from ort_core import registry


def test_not_usable_here_with_the_reason():
    devices = registry().devices("TensorrtExecutionProvider")
    if devices.devices:  # a machine with a GPU and TensorRT: nothing to check here
        return
    reason = devices.unavailable_reason
    assert reason
    from ort_ep_tensorrt import _trt

    if _trt.unavailable_reason() is not None:
        assert "tensorrt-cu12" in reason  # what to install
    assert "TensorrtExecutionProvider" in registry().providers()


def test_ort_core_providers_lists_it():
    out = subprocess.run([sys.executable, "-m", "ort_core.cli", "providers"], capture_output=True, text=True, check=True)
    line = next(line for line in out.stdout.splitlines() if line.startswith("TensorrtExecutionProvider"))
    assert "NOT usable" in line or "usable" in line


def test_importing_the_plugin_imports_no_vendor_library():
    code = ("import sys, ort_ep_tensorrt.plugin; "
            "print(any(m in sys.modules for m in ('tensorrt', 'cupy')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
