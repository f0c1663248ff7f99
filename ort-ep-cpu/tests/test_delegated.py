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
    node = helper.make_node(
        "TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=1, max_gram_length=1, max_skip_count=0,
        ngram_counts=[0], ngram_indexes=[0, 1], pool_int64s=[2, 3],
    )
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.INT64, [5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    session = ort.InferenceSession(model.SerializeToString())
    (y,) = session.run(None, {"x": np.array([2, 3, 3, 1, 2], dtype=np.int64)})
    np.testing.assert_array_equal(y, np.array([2.0, 2.0], dtype=np.float32))
    (placed,) = session.get_placement().nodes
    assert placed.note == _delegate.NOTE
