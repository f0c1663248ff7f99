"""`import ort_core` leaves onnx, onnx-ir and sympy (about 1 s to import together) for the
first session; the names that live in those modules still resolve from the package."""

from __future__ import annotations

import subprocess
import sys

import pytest

import ort_core


def test_import_does_not_load_onnx_onnx_ir_or_sympy():
    code = ("import sys, ort_core; ort_core.registry(); "
            "print(sorted(m for m in ('onnx', 'onnx_ir', 'sympy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stderr


@pytest.mark.parametrize("name", sorted(ort_core._LAZY))
def test_lazy_names_are_the_modules_own(name):
    import importlib

    module = importlib.import_module(f"ort_core.{ort_core._LAZY[name]}")
    assert getattr(ort_core, name) is getattr(module, name)
    assert name in dir(ort_core) and name in ort_core.__all__


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        ort_core.NoSuchThing  # noqa: B018


def test_a_model_with_local_functions_loads_in_a_fresh_process():
    # load.py inlines them with onnx.inliner, a submodule `import onnx` does not load: it
    # failed ("module 'onnx' has no attribute 'inliner'") unless something else imported it
    code = """
import ort_core
from onnx import helper, TensorProto
double = helper.make_function("custom", "Double", ["x"], ["y"], [helper.make_node("Add", ["x", "x"], ["y"])],
                              [helper.make_opsetid("", 17)])
graph = helper.make_graph([helper.make_node("Double", ["X"], ["Y"], domain="custom")], "g",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])])
model = helper.make_model(graph, functions=[double],
                          opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)])
from ort_core.graph.load import load_model  # what a session does first (no provider needed)
print([node.op_type for node in load_model(model.SerializeToString()).graph])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "['Add']", out.stderr[-2000:]
