"""The provider-wide list of ops delegated to onnx.reference stays short, and honest."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper

import ort_core as ort
import ort_ep_cpu
from ort_ep_cpu.kernels import _delegate

SOURCE = Path(ort_ep_cpu.__file__).parent
MAX_DELEGATED = 20


def test_delegated_ops_are_few():
    delegated = sorted(f"{d}::{op}" if d else op for d, op in _delegate.DELEGATED)
    print("delegated to onnx.reference:", ", ".join(delegated))
    assert 0 < len(delegated) < MAX_DELEGATED, delegated


def test_only_the_delegate_module_runs_onnx_reference():
    # any other kernel calling the reference evaluator would escape the list above
    users = sorted(
        str(p.relative_to(SOURCE))
        for p in SOURCE.rglob("*.py")
        if re.search(r"ReferenceEvaluator|from onnx\.reference|import onnx\.reference", p.read_text())
    )
    assert users == ["kernels/_delegate.py"], users


def test_delegated_kernel_says_so_in_the_placement():
    node = helper.make_node(
        "LinearClassifier", ["x"], ["label", "scores"], domain="ai.onnx.ml",
        coefficients=[1.0, -1.0, 0.5, 2.0, 0.0, -0.5], intercepts=[0.1, -0.2], classlabels_ints=[3, 7],
    )
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("ai.onnx.ml", 1)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    x = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0]], dtype=np.float32)
    session = ort.InferenceSession(model.SerializeToString())
    ours = session.run(None, {"x": x})
    theirs = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(ours[0], theirs[0])
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-5)
    (placed,) = session.get_placement().nodes
    assert placed.note == _delegate.NOTE
