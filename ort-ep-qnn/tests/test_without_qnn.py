"""Without a QNN library: the provider is listed as not usable, with the install command."""

from __future__ import annotations

import subprocess
import sys

from ort_ep_qnn import PROVIDER_NAME, _qnn
from ort_ep_qnn.plugin import ort_ep_devices


def test_no_library_means_not_usable_with_the_install_command(monkeypatch):
    monkeypatch.setattr(_qnn, "wheel_dir", lambda: None)
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)
    answer = ort_ep_devices(PROVIDER_NAME)
    assert answer.devices == ()
    assert "pip install 'ort-ep-qnn[htp]'" in answer.unavailable_reason
    assert "libQnnHtp.so" in answer.unavailable_reason
    assert ort_ep_devices("OtherExecutionProvider") is None


def test_qnn_sdk_root_without_the_library_names_where_it_looked(monkeypatch, tmp_path):
    monkeypatch.setattr(_qnn, "wheel_dir", lambda: None)
    monkeypatch.setenv("QNN_SDK_ROOT", str(tmp_path))
    reason = ort_ep_devices(PROVIDER_NAME).unavailable_reason
    assert str(tmp_path) in reason


def test_ort_core_providers_lists_qnn_as_not_usable_without_the_wheel():
    # a process in which the onnxruntime-qnn wheel is not found
    script = (
        "import sys\n"
        "from ort_ep_qnn import _qnn\n"
        "_qnn.wheel_dir = lambda: None\n"
        "from ort_core.cli import main\n"
        "sys.argv = ['ort-core', 'providers']\n"
        "main()\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "QNN_SDK_ROOT"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    text = out.stdout + out.stderr
    line = next(ln for ln in text.splitlines() if ln.startswith(PROVIDER_NAME))
    assert "NOT usable" in line, text
    assert "pip install 'ort-ep-qnn[htp]'" in text
