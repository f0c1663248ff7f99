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
