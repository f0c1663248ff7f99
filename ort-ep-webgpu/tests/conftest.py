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

# node cases known to differ on WebGPU, with the reason (reported by the kit, not counted)
KNOWN_FAILURES = {
    "test_attention_4d_causal_fp16_expanded": (
        "float16: 2 of 192 outputs differ by one float16 ulp (0.469 vs 0.4695); the provider "
        "computes inside each node in f32 and rounds its output once to float16, while the expected "
        "values were computed with float16 intermediates inside nodes (e.g. Softmax's exp)"
    ),
}
