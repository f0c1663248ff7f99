"""Regression tests for issue 23 on the OpenVINO provider (each fails without its fix)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_core

PROVIDERS = ["OpenVINOExecutionProvider", "CPUExecutionProvider"]


def test_deeply_nested_if_is_declined_with_a_reason_and_creates_quickly():
    code = textwrap.dedent("""
        import time
        import numpy as np
        from onnx import TensorProto, helper
        import ort_core
        T = helper.make_tensor_value_info
        def body(d, name):
            if d == 0:
                return helper.make_graph([helper.make_node("Neg", ["x"], [name])], "leaf" + name, [], [T(name, 1, [2])])
            node = helper.make_node("If", ["c"], [name], then_branch=body(d - 1, name + "t"), else_branch=body(0, name + "e"))
            return helper.make_graph([node], "g" + name, [], [T(name, 1, [2])])
        top = helper.make_node("If", ["c"], ["y"], then_branch=body(21, "t"), else_branch=body(0, "e"), name="top")
        graph = helper.make_graph([top], "m", [T("c", TensorProto.BOOL, []), T("x", 1, [2])], [T("y", 1, [2])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        sess = ort_core.InferenceSession(model.SerializeToString(), providers=["OpenVINOExecutionProvider", "CPUExecutionProvider"])
        top = [p for p in sess.get_placement().nodes if p.name == "top"][0]
        print(top.provider, "|", top.declined.get("OpenVINOExecutionProvider", ""))
        print(sess.run(None, {"c": np.array(True), "x": np.array([1, 2], np.float32)})[0].tolist())
    """)
    try:  # depth 22 took 124 s before the fix
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("session creation with 22 nested Ifs did not finish in 90 s")
    assert done.returncode == 0, done.stderr[-2000:]
    placed, result = done.stdout.strip().splitlines()[-2:]
    assert placed.startswith("CPUExecutionProvider | If with control flow nested 22 deep")
    assert result == "[-1.0, -2.0]"


def test_range_with_a_delta_of_0_is_not_given_to_openvino():
    t = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [])  # noqa: E731
    graph = helper.make_graph([helper.make_node("Range", ["a", "b", "c"], ["y"], name="r")], "t", [t("a"), t("b"), t("c")],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    sess = ort_core.InferenceSession(model.SerializeToString(), providers=PROVIDERS)
    assert "delta of 0" in sess.get_placement().nodes[0].declined["OpenVINOExecutionProvider"]
    with pytest.raises(ort_core.Fail, match="delta must not be 0"):  # was an empty tensor
        sess.run(None, {"a": np.float32(0), "b": np.float32(5), "c": np.float32(0)})


def test_openvino_messages_drop_the_cpp_source_location():
    import openvino as ov

    from ort_ep_openvino.kernel import openvino_message

    with pytest.raises(RuntimeError) as info:
        ov.Core().read_model(model="not-a-model.xml")
    assert "Exception from" in str(info.value)
    cleaned = openvino_message(info.value)
    assert "Exception from" not in cleaned and ".cpp:" not in cleaned and cleaned
