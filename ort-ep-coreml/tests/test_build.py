"""The cross-build: ``ort-core coreml-build`` writes the packages of the generated CNN and BERT
encoder here, they load back with the expected inputs and outputs, and they compute what
onnxruntime computes (test-only MIL evaluator). The EPContext model and blobs it writes round
trip; a damaged blob is an error naming it."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import numpy as np
import onnx
import pytest

from conftest import COREML, MilTestEvaluator, assert_close, reference
from ort_core.testing import models
from ort_ep_coreml.build import build_model
from ort_ep_coreml.kernel import GroupKernel
from ort_ep_coreml.options import complete, resolve
from ort_ep_coreml.package import from_blob, load


def _run_context_model(context_model, feeds):
    """Run a built context model whose every node is one EPContext node, via its blob."""
    ctx = onnx.load(str(context_model))
    [node] = list(ctx.graph.node)
    assert node.domain == "com.microsoft" and node.op_type == "EPContext"
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["source"] == COREML.encode() and attrs["embed_mode"] == 0 and attrs["main_context"] == 1
    blob = (context_model.parent / attrs["ep_cache_context"].decode()).read_bytes()
    built = from_blob(blob, context_model.parent / "unpacked", "test")
    kernel = GroupKernel(built, list(node.input), resolve(complete({})), node.name, model=MilTestEvaluator(built.package))
    return kernel(*[feeds[n] for n in node.input]), built


@pytest.mark.parametrize(("name", "dims"), [("cnn", {"batch": 2}), ("transformer", {"batch": 2}), ("transformer", {})])
def test_cli_builds_generated_models_here(name, dims, tmp_path):
    model = getattr(models, name)()
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    args = [sys.executable, "-m", "ort_core.cli", "coreml-build", str(path), str(tmp_path / "out")]
    args += [f"--dim={k}={v}" for k, v in dims.items()]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "in 1 Core ML package(s)" in done.stdout, done.stdout
    package = tmp_path / "out" / f"{name}_coreml" / "0" / "model.mlpackage"
    evaluator = MilTestEvaluator(package)
    spec_inputs = {i.name: i.type.multiArrayType for i in evaluator.spec.description.input}
    batch = dims.get("batch", 3)
    if name == "cnn":
        assert list(spec_inputs["in_0"].shape) == [2, 3, 64, 64] and "conv" in evaluator.op_types
    else:
        assert len(spec_inputs) == 2 and {"matmul", "softmax", "layer_norm", "gather"} <= set(evaluator.op_types)
        if not dims:
            assert spec_inputs["in_0"].shapeRange.sizeRanges[0].upperBound == 65536
    feeds = models.random_inputs(model, batch=batch)
    outputs, _ = _run_context_model(tmp_path / "out" / f"{name}_ctx.onnx", feeds)
    assert_close(outputs, reference(model, feeds), rtol=1e-4, atol=1e-4)


def test_context_blob_is_the_package_zipped(tmp_path):
    model = models.mlp(in_features=8, hidden=16, layers=1)
    report = build_model(model, tmp_path, dims={"batch": 1})
    blob = next(tmp_path.glob("*_CoreMLExecutionProvider_0.bin"))
    names = zipfile.ZipFile(blob).namelist()
    assert "ort_coreml.json" in names and "model.mlpackage/Manifest.json" in names
    unpacked = load(report.packages[0].parent)
    assert unpacked.inputs[0]["name"] == "x" and unpacked.outputs[0]["dtype"] == "float32"


def test_damaged_blob_is_an_error_naming_it(tmp_path):
    with pytest.raises(ValueError, match="partition p0.*not a Core ML context blob"):
        from_blob(b"not a zip", tmp_path, "partition p0")
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("../escape.txt", "x")
    with pytest.raises(ValueError, match="escapes"):
        from_blob(archive.read_bytes(), tmp_path / "d", "partition p1")


def test_unknown_build_option_is_refused(tmp_path):
    with pytest.raises(ValueError, match="valid options: ModelFormat"):
        build_model(models.mlp(in_features=8, hidden=16, layers=1), tmp_path, {"ComputeUnits": "ALL"})


def test_partly_claimed_model_keeps_the_other_nodes(tmp_path):
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("TopK", ["a", "k"], ["v", "i"], name="topk", axis=-1),
             helper.make_node("Sigmoid", ["v"], ["y"], name="sigmoid")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("i", TensorProto.INT64, None)],
                              [helper.make_tensor(name="k", data_type=TensorProto.INT64, dims=[1], vals=[3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    report = build_model(model, tmp_path)
    assert "TopK is not lowered" in report.declined["topk"]
    ctx = onnx.load(str(report.context_model))
    assert [n.op_type for n in ctx.graph.node] == ["EPContext", "TopK", "EPContext"]
    assert [t.name for t in ctx.graph.initializer] == ["k"]
    onnx.checker.check_model(ctx)
    np.testing.assert_equal(len(report.packages), 2)


def test_a_group_that_fails_to_build_stays_in_the_model(tmp_path, monkeypatch):
    from ort_ep_coreml import build

    def broken(*args, **kwargs):
        raise RuntimeError("converter exploded")

    monkeypatch.setattr(build, "save", broken)
    report = build_model(models.mlp(in_features=8, hidden=16, layers=1), tmp_path, dims={"batch": 1})
    assert report.groups == [] and report.packages == []
    assert all("converter exploded" in why for why in report.declined.values()) and report.declined
    ctx = onnx.load(str(report.context_model))
    assert "EPContext" not in [n.op_type for n in ctx.graph.node]
