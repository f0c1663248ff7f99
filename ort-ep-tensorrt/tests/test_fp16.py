"""trt_fp16_enable under TensorRT 11 converts the claimed subgraph to float16 before parsing.
The converted ONNX runs here through the CPU provider: it must stay within float16 tolerance
of the float32 model, keep float32 I/O, and leave the sensitive ops in float32."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import ort_core
from ort_core.testing import models
from ort_ep_tensorrt.fp16 import SENSITIVE_OPS, to_float16

pytest.importorskip("ort_ep_cpu")


def _run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    session = ort_core.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize("name, make, rtol", [
    # float16 has a 2^-11 relative step; through a few layers errors add up to about 1e-2
    ("cnn", lambda: models.cnn(image=32, width=16, blocks=2), 2e-2),
    ("bert", lambda: models.transformer(seq=16, dim=64, heads=4, layers=2), 2e-2),
])
def test_float16_conversion_stays_within_float16_tolerance(name, make, rtol):
    model = make()
    converted = to_float16(model)
    assert [i.type.tensor_type.elem_type for i in converted.graph.input] == \
           [i.type.tensor_type.elem_type for i in model.graph.input]
    assert all(o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT for o in converted.graph.output)
    assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in converted.graph.initializer)
    feeds = models.random_inputs(model, batch=2, seed=3)
    expected, got = _run(model, feeds), _run(converted, feeds)
    for e, g in zip(expected, got):
        scale = max(float(np.abs(e).max()), 1e-3)
        np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol * scale, err_msg=name)


def test_sensitive_ops_stay_float32():
    model = models.transformer(seq=8, dim=32, heads=2, layers=1)
    converted = to_float16(model)
    kept = [n for n in converted.graph.node if n.op_type in SENSITIVE_OPS]
    assert kept, "the encoder has Softmax/LayerNormalization"
    # a kept node's inputs are float32: each is fed by a Cast to float32 or is a float32 value
    casts_to_f32 = {n.output[0] for n in converted.graph.node
                    if n.op_type == "Cast" and n.attribute[0].i == onnx.TensorProto.FLOAT}
    assert any(i in casts_to_f32 for n in kept for i in n.input)
