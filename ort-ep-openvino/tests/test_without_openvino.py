"""Without a usable openvino the provider is listed as not usable, with the reason, and
nothing else breaks."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import OV
from ort_ep_openvino import _ov, plugin


def test_devices_hook_reports_the_import_failure(monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)  # makes `import openvino` raise ImportError
    _ov.reset()
    try:
        answer = plugin.ort_ep_devices(OV)
        assert answer.devices == ()
        assert "openvino is not installed" in answer.unavailable_reason
        assert "pip install" in answer.unavailable_reason
    finally:
        monkeypatch.undo()
        _ov.reset()
    assert plugin.ort_ep_devices(OV).devices  # and it recovers once openvino imports again


def test_runtime_without_openvino_falls_back_to_cpu():
    """A fresh interpreter where importing openvino fails, as on a machine without it."""
    code = textwrap.dedent(
        """
        import sys, importlib.abc
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "openvino" or name.startswith("openvino."):
                    raise ImportError("No module named 'openvino' (blocked by the test)")
        sys.meta_path.insert(0, Block())
        import numpy as np
        import ort_core as ort
        from ort_core.testing import models
        reg = ort.registry()
        assert "OpenVINOExecutionProvider" in reg.providers(), "the plugin itself must load"
        available = ort.get_available_providers()
        assert "OpenVINOExecutionProvider" not in available and "CPUExecutionProvider" in available, available
        print("REASON:", reg.devices("OpenVINOExecutionProvider").unavailable_reason)
        model = models.mlp(in_features=8, hidden=16, layers=1)
        sess = ort.InferenceSession(model.SerializeToString(),
                                    providers=["OpenVINOExecutionProvider", "CPUExecutionProvider"])
        assert sess.get_providers() == ["CPUExecutionProvider"]
        out = sess.run(None, models.random_inputs(model, batch=2))[0]
        print("OK", out.shape)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "REASON: openvino is not installed" in done.stdout
    assert "OK (2, 10)" in done.stdout
    assert "OpenVINOExecutionProvider is installed but cannot run here" in done.stderr
