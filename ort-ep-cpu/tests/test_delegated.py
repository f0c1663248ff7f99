"""The provider-wide list of ops delegated to onnx.reference stays short, and honest."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
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
    # a two-class tree classifier with PROBIT: delegated (onnxruntime's own answer there is no
    # model's: labels outside classlabels, -inf scores), so only the run and the note are checked
    node = helper.make_node(
        "TreeEnsembleClassifier", ["x"], ["label", "scores"], domain="ai.onnx.ml", classlabels_int64s=[3, 7],
        nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0], nodes_values=[0.5, 0, 0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
        class_treeids=[0, 0], class_nodeids=[1, 2], class_ids=[0, 1], class_weights=[0.2, 0.7], post_transform="PROBIT",
    )
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    x = np.array([[0.1, 2.0], [0.9, 0.5]], dtype=np.float32)
    session = ort.InferenceSession(model.SerializeToString())
    labels, scores = session.run(None, {"x": x})
    assert labels.shape == (2,) and scores.shape == (2, 2)
    (placed,) = session.get_placement().nodes
    assert placed.note == _delegate.NOTE
