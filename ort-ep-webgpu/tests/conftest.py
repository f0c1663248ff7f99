"""Shared fixtures: tests that need a WebGPU adapter skip with wgpu's reason when there is none
(CI installs lavapipe, so they run there)."""

from __future__ import annotations

import pytest

from ort_ep_webgpu.runtime import list_adapters

PROVIDERS = ["WebGpuExecutionProvider", "CPUExecutionProvider"]


def adapter_reason() -> str | None:
    records, reason = list_adapters()
    return None if records else reason


needs_adapter = pytest.mark.skipif(adapter_reason() is not None, reason=f"no WebGPU adapter: {adapter_reason()}")
