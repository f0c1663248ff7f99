"""Regression tests for issue 23 (reliability under bad input, concurrency and hostile plugins).
Each test fails without the fix it names."""

from __future__ import annotations

import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import ort_core
from conftest import make_model, tensor_info
from fake_providers import HostProvider
from ort_core import plugins


# ------------------------------------------------------------------ 1. first use from threads
class _SlowEntryPoint:
    """An entry point whose import takes a while, as a real provider's (numpy, openvino) does."""

    name = "slow-host"
    dist = None

    def load(self):
        time.sleep(0.3)
        return HostProvider()


def test_first_use_from_many_threads_sees_every_provider(monkeypatch):
    monkeypatch.setattr(plugins, "entry_points", lambda group: [_SlowEntryPoint()])
    fresh = plugins.PluginRegistry()
    monkeypatch.setattr(plugins, "_REGISTRY", fresh)
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", [2])], [tensor_info("y", [2])])
    data = model.SerializeToString()
    seen: list = []
    errors: list = []
    barrier = threading.Barrier(8)

    def worker(k: int) -> None:
        barrier.wait()
        try:
            if k % 2:
                seen.append(ort_core.get_available_providers())
            else:
                sess = ort_core.InferenceSession(data)
                seen.append(sess.get_providers())
        except Exception as exc:  # collected: the assertion below names them
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert seen == [["CPUExecutionProvider"]] * 8
