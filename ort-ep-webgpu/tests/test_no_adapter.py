"""Without any adapter the provider is listed as not usable, with wgpu's reason, and nothing
else breaks. wgpu is replaced by a fake that fails as wgpu does on a machine without a Vulkan,
Metal, D3D12 or OpenGL driver; it runs in a subprocess so the process-wide caches start empty."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = r"""
import json
import wgpu

def fail(*args, **kwargs):
    raise RuntimeError("Request adapter failed")

wgpu.gpu.enumerate_adapters_sync = fail
wgpu.gpu.request_adapter_sync = fail

import numpy as np
import ort_core as ort
from ort_core.testing import models

result = {}
result["available"] = ort.get_available_providers()
result["installed"] = list(ort.registry().providers())
result["reason"] = ort.registry().devices("WebGpuExecutionProvider").unavailable_reason
result["devices"] = [d.ep_name for d in ort.get_ep_devices()]
model = models.mlp(in_features=8, hidden=8, layers=1)
feeds = models.random_inputs(model)
session = ort.InferenceSession(model, providers=["WebGpuExecutionProvider", "CPUExecutionProvider"])
result["session_providers"] = session.get_providers()
result["output_shape"] = list(session.run(None, feeds)[0].shape)
options = ort.SessionOptions()
options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
try:
    ort.InferenceSession(model, options, providers=["WebGpuExecutionProvider"])
    result["strict"] = "no error"
except ort.EPFail as exc:
    result["strict"] = str(exc)
print("RESULT " + json.dumps(result))
"""


def test_no_adapter_is_reported_and_cpu_still_runs():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    assert "WebGpuExecutionProvider" in result["installed"]
    assert "WebGpuExecutionProvider" not in result["available"]
    assert "CPUExecutionProvider" in result["available"]
    assert "Request adapter failed" in result["reason"]
    assert "mesa-vulkan-drivers" in result["reason"]
    assert "WebGpuExecutionProvider" not in result["devices"]
    assert result["session_providers"] == ["CPUExecutionProvider"]
    assert result["output_shape"] == [1, 10]
    assert "WebGpuExecutionProvider is installed but cannot run here" in result["strict"]
    assert "Request adapter failed" in result["strict"]
