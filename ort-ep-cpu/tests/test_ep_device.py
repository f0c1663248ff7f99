"""The CPU provider's device as onnxruntime's device API describes the same processor."""

from __future__ import annotations

import onnxruntime

import ort_core


def _cpu(devices, name):
    return next(d for d in devices if d.ep_name == name)


def test_hardware_vendor_and_vendor_id_match_onnxruntime():
    want = _cpu(onnxruntime.get_ep_devices(), "CPUExecutionProvider").device
    got = _cpu(ort_core.get_ep_devices(), "CPUExecutionProvider").device
    assert got.type == ort_core.OrtHardwareDeviceType.CPU == int(want.type)
    assert (got.vendor, got.vendor_id) == (want.vendor, want.vendor_id)
