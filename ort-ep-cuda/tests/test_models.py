"""Parity with onnxruntime (CPU) on the generated MLP, CNN and transformer, every node on CUDA.

Tolerances rtol=1e-3, atol=1e-5: float32 kernels sum in another order than onnxruntime's MLAS
(and on a GPU, use_tf32=1 would round products to TF32, so the GPU run sets use_tf32=0 here).
The float16 versions of the models (every float tensor made float16) are compared with the
float32 reference at float16's tolerance (2e-2): onnxruntime's CPU provider lacks float16
kernels for several of their ops."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import numpy_helper

import ort_core as ort
from ort_core.testing import models

PROVIDERS = [("CUDAExecutionProvider", {"use_tf32": "0"}), "CPUExecutionProvider"]


def _reference(model, feeds):
    return onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_model_parity_all_nodes_on_cuda(name):
    model = models.MODELS[name]()
    feeds = models.random_inputs(model, batch=2, seed=1)
    session = ort.InferenceSession(model, providers=PROVIDERS)
    placement = session.get_placement()
    assert placement.counts() == {"CUDAExecutionProvider": len(placement.nodes)}, str(placement)
    # copies only where values cross the graph's edges
    edges = {i.name for i in model.graph.input} | {o.name for o in model.graph.output}
    assert {c.value for c in placement.copies} <= edges, placement.copies
    assert {(c.source, c.target) for c in placement.copies} <= {("Cpu", "Cuda"), ("Cuda", "Cpu")}
    expected = _reference(model, feeds)
    for _ in range(2):  # the second run reuses the arena and the cached plans
        got = session.run(None, feeds)
        for g, e in zip(got, expected):
            assert g.shape == e.shape and g.dtype == e.dtype
            np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-5)


def test_batch_sizes_change_between_runs():
    model = models.cnn(image=16, width=8, blocks=2)
    session = ort.InferenceSession(model, providers=PROVIDERS)
    for batch in (1, 3, 2):
        feeds = models.random_inputs(model, batch=batch, seed=batch)
        np.testing.assert_allclose(session.run(None, feeds)[0], _reference(model, feeds)[0], rtol=1e-3, atol=1e-5)


def _to_float16(model: onnx.ModelProto) -> onnx.ModelProto:
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for k, init in enumerate(model.graph.initializer):
        if init.data_type == onnx.TensorProto.FLOAT:
            model.graph.initializer[k].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float16), init.name))
    for node in model.graph.node:
        for attr in node.attribute:
            if node.op_type == "Constant" and attr.name == "value" and attr.t.data_type == onnx.TensorProto.FLOAT:
                attr.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(attr.t).astype(np.float16)))
            if node.op_type == "Cast" and attr.name == "to" and attr.i == onnx.TensorProto.FLOAT:
                attr.i = onnx.TensorProto.FLOAT16
    for value in (*model.graph.input, *model.graph.output, *model.graph.value_info):
        if value.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
            value.type.tensor_type.elem_type = onnx.TensorProto.FLOAT16
    return model


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_float16_models_all_nodes_on_cuda(name):
    model = models.MODELS[name]()
    feeds = models.random_inputs(model, batch=2, seed=1)
    half = _to_float16(model)
    session = ort.InferenceSession(half, providers=PROVIDERS)
    placement = session.get_placement()
    assert placement.counts() == {"CUDAExecutionProvider": len(placement.nodes)}, str(placement)
    half_feeds = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in feeds.items()}
    for got, expected in zip(session.run(None, half_feeds), _reference(model, feeds)):
        assert got.dtype == np.float16
        np.testing.assert_allclose(got.astype(np.float32), expected, rtol=2e-2, atol=2e-2)
