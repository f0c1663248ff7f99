"""onnxruntime's set_seed: random ops without a seed attribute draw the same numbers in sessions
made after the same seed, and other numbers after another seed. Run against onnxruntime too."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper


def _model(*ops: str) -> bytes:
    nodes = [helper.make_node(op, [], [f"y{k}"], name=f"r{k}", shape=[16], dtype=TensorProto.FLOAT)
             for k, op in enumerate(ops)]
    outputs = [helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, [16]) for k in range(len(ops))]
    model = helper.make_model(helper.make_graph(nodes, "r", [], outputs), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.fixture(autouse=True)
def unseeded():
    """ort_core's seed is process-wide: other tests' random ops stay unseeded."""
    import ort_core.seed

    yield
    ort_core.seed._seed = None


@pytest.fixture(params=["onnxruntime", "ort_core"])
def ort(request):
    import importlib

    return importlib.import_module(request.param)


def test_same_seed_same_numbers_other_seed_other_numbers(ort):
    data = _model("RandomNormal", "RandomUniform")
    ort.set_seed(7)
    a = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {})
    ort.set_seed(7)
    b = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {})
    ort.set_seed(8)
    c = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {})
    for x, y, z in zip(a, b, c):
        np.testing.assert_array_equal(x, y)
        assert not np.array_equal(x, z)
    assert not np.array_equal(a[0], a[1])  # two unseeded nodes draw apart
