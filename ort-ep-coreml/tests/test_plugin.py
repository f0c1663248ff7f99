"""Discovery, options and the command line, as a user meets them on this machine."""

from __future__ import annotations

import subprocess
import sys

import pytest

import ort_core as ort
from conftest import COREML, macos_only, session
from ort_core.testing import models
from ort_ep_coreml import _ct, plugin
from ort_ep_coreml.options import OPTION_NAMES, complete, resolve

linux_only = pytest.mark.skipif(sys.platform == "darwin", reason="checks the answer off macOS")


@linux_only
def test_listed_as_not_usable_with_the_build_hint():
    answer = plugin.ort_ep_devices(COREML)
    assert answer.devices == ()
    assert answer.unavailable_reason.startswith("Core ML runs on macOS only")
    assert "packages can still be built" in answer.unavailable_reason
    assert "coreml-build" in answer.unavailable_reason
    assert COREML not in ort.get_available_providers()


@linux_only
def test_ort_core_providers_says_what_is_possible_here():
    done = subprocess.run([sys.executable, "-m", "ort_core.cli", "providers"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith(COREML))
    assert "NOT usable: Core ML runs on macOS only" in line and "packages can still be built" in line, line


@linux_only
def test_session_falls_back_to_cpu_here():
    model = models.mlp(in_features=8, hidden=16, layers=1)
    sess = session(model)
    assert sess.get_providers() == ["CPUExecutionProvider"]


@macos_only
def test_macos_lists_the_compute_units():
    answer = plugin.ort_ep_devices(COREML)
    assert [d.device_type for d in answer.devices] == ["CPU", "GPU", "NPU"]
    assert "CPUAndNeuralEngine" in answer.devices[0].metadata["compute_units"]


def test_missing_coremltools_is_the_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "coremltools", None)  # `import coremltools` raises ImportError
    _ct.reset()
    try:
        answer = plugin.ort_ep_devices(COREML)
        assert answer.devices == () and "pip install 'coremltools>=8.0'" in answer.unavailable_reason
    finally:
        monkeypatch.undo()
        _ct.reset()
    assert _ct.load().__version__


def test_unknown_option_names_the_valid_ones():
    model = models.mlp(in_features=8, hidden=16, layers=1)
    with pytest.raises(ort.InvalidArgument) as info:
        session(model, {"ModelFromat": "MLProgram"})
    text = str(info.value)
    assert "ModelFromat" in text and all(name in text for name in OPTION_NAMES), text
    with pytest.raises(ValueError, match="valid options: ModelFormat"):
        complete({"ModelFromat": "MLProgram"})


@pytest.mark.parametrize(("key", "value", "says"), [
    ("ModelFormat", "NeuralNetwork", "builds ML Programs only"),
    ("MLComputeUnits", "GPU", "CPUOnly, CPUAndGPU, CPUAndNeuralEngine, ALL"),
    ("SpecializationStrategy", "Fast", "Default, FastPrediction"),
    ("RequireStaticInputShapes", "2", "valid values: 0, 1"),
])
def test_bad_values_name_the_valid_ones(key, value, says):
    model = models.mlp(in_features=8, hidden=16, layers=1)
    with pytest.raises(ort.InvalidArgument) as info:
        session(model, {key: value})
    assert key in str(info.value) and says in str(info.value), str(info.value)


def test_onnxruntime_spellings_parse():
    parsed = complete({"ModelFormat": "MLProgram", "MLComputeUnits": "CPUAndNeuralEngine", "RequireStaticInputShapes": "1",
                       "EnableOnSubgraphs": "0", "SpecializationStrategy": "FastPrediction",
                       "AllowLowPrecisionAccumulationOnGPU": "1"})
    assert parsed["MLComputeUnits"] == "CPUAndNeuralEngine" and parsed["RequireStaticInputShapes"] is True
    assert parsed["SpecializationStrategy"] == "FastPrediction" and parsed["AllowLowPrecisionAccumulationOnGPU"] is True


def test_subgraph_nodes_need_enable_on_subgraphs():
    import onnx_ir as ir
    from onnx import TensorProto, helper

    from ort_core import GraphView
    from ort_ep_coreml.capability import decline_reason
    from ort_ep_coreml.options import resolve

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "body",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    view = GraphView(ir.from_proto(model).graph, opset_imports={"": 17}, path="if_0/then_branch")
    off = decline_reason(view, view.nodes[0], resolve(complete({})))
    assert off is not None and "EnableOnSubgraphs=1" in off
    assert decline_reason(view, view.nodes[0], resolve(complete({"EnableOnSubgraphs": "1"}))) is None


@linux_only
def test_loading_a_package_here_says_where_it_runs(tmp_path):
    from ort_ep_coreml.build import build_model
    from ort_ep_coreml.kernel import load_model
    from ort_ep_coreml.package import load

    report = build_model(models.mlp(in_features=8, hidden=16, layers=1), tmp_path, dims={"batch": 1})
    with pytest.raises(ort.Fail, match="Core ML runs on macOS only: the package .*model.mlpackage was built"):
        load_model(load(report.packages[0].parent), resolve(complete({})))
