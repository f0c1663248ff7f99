"""EPContext models through OpenVINO: CompiledModel.export_model at the cold session,
Core.import_model when the context model is loaded (no compilation), same outputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import ort_core as ort
from conftest import CPU, OV, assert_parity, ov_state, reference
from ort_core.testing import models


@pytest.fixture(scope="module")
def cnn_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("ctx") / "cnn.onnx"
    onnx.save(models.cnn(image=32, width=8, blocks=2), path)
    return path


def _options(**entries) -> ort.SessionOptions:
    so = ort.SessionOptions()
    for k, v in entries.items():
        so.add_session_config_entry(k, v)
    return so


def _attrs(node) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _cold(path, tmp_path, ov_options=None, **entries):
    out = tmp_path / "cnn_ctx.onnx"
    so = _options(**{"ep.context_enable": "1", "ep.context_file_path": str(out), **entries})
    return ort.InferenceSession(str(path), so, providers=[(OV, ov_options or {}), CPU]), out


def test_reload_imports_instead_of_compiling(cnn_file, tmp_path):
    cold, out = _cold(cnn_file, tmp_path)
    assert sum(k.compilations for k in ov_state(cold)["kernels"]) == 1
    model = onnx.load(out)
    (node,) = [n for n in model.graph.node if n.op_type == "EPContext"]
    attrs = _attrs(node)
    assert node.domain == "com.microsoft" and attrs["source"] == OV.encode()
    assert attrs["hardware_architecture"] == b"CPU" and attrs["ep_sdk_version"]
    assert len(model.graph.initializer) == 0  # the weights are inside the compiled blob
    warm = ort.InferenceSession(str(out), providers=[OV, CPU])
    (kernel,) = ov_state(warm)["kernels"]
    assert type(kernel).__name__ == "ImportedKernel" and kernel.compilations == 0
    assert [p.provider for p in warm.get_placement().nodes] == [OV]
    reference_model = onnx.load(cnn_file).SerializeToString()
    for batch in (1, 3):
        feeds = models.random_inputs(onnx.load(cnn_file), batch=batch, seed=batch)
        got = warm.run(None, feeds)
        np.testing.assert_array_equal(got[0], cold.run(None, feeds)[0])
        assert_parity(got, reference(reference_model, feeds))


def test_side_file_mode(cnn_file, tmp_path):
    _, out = _cold(cnn_file, tmp_path, **{"ep.context_embed_mode": "0"})
    side = tmp_path / f"cnn_ctx_{OV}_0.bin"
    assert side.stat().st_size > 1000
    warm = ort.InferenceSession(str(out), providers=[OV, CPU])
    feeds = models.random_inputs(onnx.load(cnn_file), batch=2, seed=0)
    assert_parity(warm.run(None, feeds), reference(onnx.load(cnn_file).SerializeToString(), feeds))


def test_truncated_blob_and_other_versions_are_refused(cnn_file, tmp_path):
    _, out = _cold(cnn_file, tmp_path, **{"ep.context_embed_mode": "0"})
    side = tmp_path / f"cnn_ctx_{OV}_0.bin"
    side.write_bytes(side.read_bytes()[:200])
    with pytest.raises(ort.Fail, match=f"cannot import EPContext partition '{OV}_0'"):
        ort.InferenceSession(str(out), providers=[OV, CPU])
    model = onnx.load(out)
    for a in model.graph.node[0].attribute:
        if a.name == "ep_sdk_version":
            a.s = b"2020.1"
    onnx.save(model, out)
    with pytest.raises(ort.Fail, match="compiled by OpenVINO 2020.1"):
        ort.InferenceSession(str(out), providers=[OV, CPU])


def test_model_compiler(cnn_file, tmp_path):
    so = ort.SessionOptions()
    so.add_provider(OV, {})
    data = ort.ModelCompiler(so, str(cnn_file)).compile_to_bytes()
    sess = ort.InferenceSession(data, providers=[OV, CPU])
    assert all(k.compilations == 0 for k in ov_state(sess)["kernels"])
    feeds = models.random_inputs(onnx.load(cnn_file), batch=1, seed=5)
    assert_parity(sess.run(None, feeds), reference(onnx.load(cnn_file).SerializeToString(), feeds))


def test_per_shape_groups_stay_as_nodes(cnn_file, tmp_path):
    # with disable_dynamic_shapes a symbolic-batch group has no one compiled model to export
    out = tmp_path / "static_ctx.onnx"
    so = _options(**{"ep.context_enable": "1", "ep.context_file_path": str(out)})
    ort.InferenceSession(str(cnn_file), so, providers=[(OV, {"disable_dynamic_shapes": "true"}), CPU])
    assert not [n for n in onnx.load(out).graph.node if n.op_type == "EPContext"]


def _if_model():
    """y = If(c) then Relu(x + w) * w else Sigmoid(x - w) * w: the branches are the groups."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.linspace(-1, 1, 4, dtype=np.float32), "w")
    vi = helper.make_tensor_value_info

    def branch(name, first, act):
        nodes = [helper.make_node(first, ["x", "w"], [f"{name}_a"]), helper.make_node(act, [f"{name}_a"], [f"{name}_b"]),
                 helper.make_node("Mul", [f"{name}_b", "w"], [f"{name}_y"])]
        return helper.make_graph(nodes, name, [], [vi(f"{name}_y", TensorProto.FLOAT, [2, 4])])

    node = helper.make_node("If", ["c"], ["y"], then_branch=branch("then", "Add", "Relu"),
                            else_branch=branch("else", "Sub", "Sigmoid"))
    graph = helper.make_graph([node], "g", [vi("x", TensorProto.FLOAT, [2, 4]), vi("c", TensorProto.BOOL, [])],
                              [vi("y", TensorProto.FLOAT, [2, 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_groups_inside_control_flow_bodies_are_exported(tmp_path):
    from ort_core.testing.plugins import OpVeto

    model = _if_model()
    path = tmp_path / "if.onnx"
    onnx.save(model, path)
    # the If itself on the CPU provider (as silero-vad's are), its branches on OpenVINO
    # min_subgraph_size=1: the branches are 2-3 nodes, below the default
    with OpVeto(OV, ops=["If"], reason="If on the CPU provider in this test").installed():
        cold, out = _cold(path, tmp_path, {"min_subgraph_size": 1})
    assert [p.provider for p in cold.get_placement().nodes if p.graph == ""] == [CPU]
    saved = onnx.load(out)
    (if_node,) = saved.graph.node
    for attr in if_node.attribute:
        assert [n.op_type for n in attr.g.node] == ["EPContext"], attr.name
    warm = ort.InferenceSession(str(out), providers=[OV, CPU])  # an EPContext node is never "too small"
    kernels = ov_state(warm)["kernels"]
    assert len(kernels) == 2 and all(type(k).__name__ == "ImportedKernel" for k in kernels)
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    for c in (True, False):
        feeds = {"x": x, "c": np.array(c)}
        assert_parity(warm.run(None, feeds), reference(model.SerializeToString(), feeds))
        np.testing.assert_allclose(warm.run(None, feeds)[0], cold.run(None, feeds)[0], rtol=1e-6)
