"""``ort_core.sizes``: the output-size estimate that constant folding (``session.max_fold_bytes``)
and the CPU provider's ``max_mem`` ask before a node runs, checked against what onnx's reference
evaluator makes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from ort_core.sizes import GROWING, output_elements

f32, i64 = np.float32, np.int64
CASES = [
    ("ConstantOfShape", [np.array([3, 4], i64)], {}, 17),
    ("Expand", [np.ones((3, 1), f32), np.array([2, 1, 5], i64)], {}, 17),
    ("Tile", [np.ones((2, 3), f32), np.array([4, 2], i64)], {}, 17),
    ("Range", [np.array(1.0, f32), np.array(10.0, f32), np.array(2.5, f32)], {}, 17),
    ("OneHot", [np.array([[1, 2], [0, 3]], i64), np.array(5, i64), np.array([0, 1], f32)], {"axis": 1}, 17),
    ("Pad", [np.ones((2, 3), f32), np.array([1, 0, 2, 4], i64)], {}, 17),
    ("Pad", [np.ones((2, 3), f32), np.array([1, 2], i64), None, np.array([-1], i64)], {}, 18),
    ("Pad", [np.ones((2, 3), f32)], {"pads": [0, 1, 1, 1]}, 2),
    ("Resize", [np.ones((1, 1, 2, 3), f32), None, np.array([1, 1, 2.5, 3], f32)], {}, 13),
    ("Resize", [np.ones((1, 1, 2, 3), f32), None, None, np.array([1, 1, 5, 7], i64)], {}, 13),
    ("Resize", [np.ones((1, 1, 2, 3), f32), None, None, np.array([4, 4], i64)],
     {"axes": [2, 3], "keep_aspect_ratio_policy": "not_smaller"}, 18),
    ("Upsample", [np.ones((1, 1, 2, 3), f32), np.array([1, 1, 2, 2], f32)], {}, 9),
    ("Add", [np.ones((2, 1), f32), np.ones((1, 3), f32)], {}, 17),
]


@pytest.mark.parametrize("op, inputs, attributes, opset", CASES, ids=[f"{c[0]}-{k}" for k, c in enumerate(CASES)])
def test_the_estimate_is_the_size_onnx_reference_makes(op, inputs, attributes, opset):
    names = [f"i{k}" if x is not None else "" for k, x in enumerate(inputs)]
    node = helper.make_node(op, names, ["y"], **attributes)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, 1 if x.dtype == f32 else 7, x.shape)
                                            for n, x in zip(names, inputs) if n],
                              [helper.make_tensor_value_info("y", 0, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    (y,) = ReferenceEvaluator(model).run(None, {n: x for n, x in zip(names, inputs) if n})
    assert output_elements(op, inputs, attributes.get) == y.size


def test_a_bomb_is_estimated_without_being_made():
    assert output_elements("ConstantOfShape", [np.array([10**5, 10**5, 10**5], i64)]) == 10**15
    assert output_elements("Expand", [np.ones(1, f32), np.array([2**40, 2**40], i64)]) == 2**80  # past int64


def test_unknown_is_none():
    assert output_elements("MatMul", [np.ones((2, 3)), np.ones((3, 4))]) is None  # grows: not estimated
    assert output_elements("Pad", [np.ones((2, 3), f32), np.array([1, 2, 3], i64)]) is None  # bad pads
    assert output_elements("Range", [np.array(0.0), np.array(1.0), np.array(0.0)]) is None  # delta 0
    assert "ConstantOfShape" in GROWING and "Add" not in GROWING
