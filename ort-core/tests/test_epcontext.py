"""EPContext models: written by a session (ep.context_enable) or ModelCompiler, reloaded
without compiling, with onnxruntime's schema and keys."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from context_provider import ContextCompilerProvider

import ort_core
from conftest import chain_expected, chain_model
from ort_core import epcontext

NAME = "ContextCompilerExecutionProvider"


@pytest.fixture
def compiler(host):
    provider = ContextCompilerProvider()
    assert ort_core.register(provider, "context-compiler")
    return provider


def _options(**entries) -> ort_core.SessionOptions:
    so = ort_core.SessionOptions()
    for k, v in entries.items():
        so.add_session_config_entry(k, v)
    return so


def _save(tmp_path, model=None):
    path = tmp_path / "chain.onnx"
    onnx.save(model or chain_model(), path)
    return path


X = np.array([[1.0, -2.0, 0.5, 3.0], [-1.0, 2.0, -0.5, 0.25]], np.float32)


def test_session_writes_context_model_beside_the_model(compiler, tmp_path):
    path = _save(tmp_path)
    so = _options(**{"ep.context_enable": "1"})
    sess = ort_core.InferenceSession(str(path), so, providers=[NAME])
    ctx = tmp_path / "chain_ctx.onnx"
    assert sess.get_placement().context_model == str(ctx)
    assert compiler.compilations == 1
    model = onnx.load(ctx)
    ops = [(n.domain, n.op_type) for n in model.graph.node]
    # add, relu1, mul, relu2 are one group; Sub stays (the test compiler does not take it)
    assert ops == [("com.microsoft", "EPContext"), ("", "Sub")]
    node = model.graph.node[0]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["main_context"] == 1 and attrs["embed_mode"] == 1
    assert attrs["source"] == NAME.encode() and attrs["ep_sdk_version"] == b"1.0"
    assert attrs["hardware_architecture"] == b"test-npu" and attrs["partition_name"] == f"{NAME}_0".encode()
    assert attrs["ep_cache_context"].startswith(b"TESTCTX1")
    assert list(node.input) == ["x"] and list(node.output) == ["r2"]
    # the group's weight lives in the blob now; Sub reads no initializer
    assert [t.name for t in model.graph.initializer] == []
    assert any(o.domain == "com.microsoft" for o in model.opset_import)


def test_reload_skips_compilation_and_gives_the_same_outputs(compiler, tmp_path):
    path = _save(tmp_path)
    cold = ort_core.InferenceSession(str(path), _options(**{"ep.context_enable": "1"}), providers=[NAME])
    expected = cold.run(None, {"x": X})[0]
    np.testing.assert_allclose(expected, chain_expected(X), rtol=1e-6)
    assert (compiler.compilations, compiler.loads) == (1, 0)
    warm = ort_core.InferenceSession(str(tmp_path / "chain_ctx.onnx"), providers=[NAME])
    assert (compiler.compilations, compiler.loads) == (1, 1)
    np.testing.assert_array_equal(warm.run(None, {"x": X})[0], expected)
    placed = {p.op_type: p.provider for p in warm.get_placement().nodes}
    assert placed == {"EPContext": NAME, "Sub": "CPUExecutionProvider"}


def test_embed_mode_0_writes_a_side_file_and_reads_it_back(compiler, tmp_path):
    path = _save(tmp_path)
    out = tmp_path / "out" / "cache.onnx"
    so = _options(**{"ep.context_enable": "1", "ep.context_embed_mode": "0", "ep.context_file_path": str(out)})
    ort_core.InferenceSession(str(path), so, providers=[NAME])
    side = out.parent / f"cache_{NAME}_0.bin"
    assert side.read_bytes().startswith(b"TESTCTX1")
    node = onnx.load(out).graph.node[0]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["embed_mode"] == 0 and attrs["ep_cache_context"] == side.name.encode()
    warm = ort_core.InferenceSession(str(out), providers=[NAME])
    np.testing.assert_allclose(warm.run(None, {"x": X})[0], chain_expected(X), rtol=1e-6)
    assert compiler.loads == 1

    side.unlink()
    with pytest.raises(ort_core.InvalidGraph, match=f"cache_{NAME}_0.bin.*not found"):
        ort_core.InferenceSession(str(out), providers=[NAME])
    # given as bytes, the file cannot be found: said so
    side.write_bytes(b"TESTCTX1" + b"1.0\n")
    with pytest.raises(ort_core.InvalidGraph, match="load it from its path"):
        ort_core.InferenceSession(out.read_bytes(), providers=[NAME])


def test_context_file_outside_the_model_folder_is_refused(compiler, tmp_path):
    path = _save(tmp_path)
    out = tmp_path / "ctx.onnx"
    ort_core.InferenceSession(str(path), _options(**{"ep.context_enable": "1", "ep.context_embed_mode": "0",
                                                     "ep.context_file_path": str(out)}), providers=[NAME])
    model = onnx.load(out)
    for a in model.graph.node[0].attribute:
        if a.name == "ep_cache_context":
            a.s = b"../../etc/passwd"
    onnx.save(model, out)
    with pytest.raises(ort_core.OrtError, match="outside the model's folder"):
        ort_core.InferenceSession(str(out), providers=[NAME])


def test_blob_of_another_sdk_version_is_refused_naming_the_partition(compiler, registry, tmp_path):
    path = _save(tmp_path)
    ort_core.InferenceSession(str(path), _options(**{"ep.context_enable": "1"}), providers=[NAME])
    compiler.sdk_version = "2.0"
    with pytest.raises(ort_core.OrtError, match=f"{NAME}_0.*test SDK 1.0, this is 2.0"):
        ort_core.InferenceSession(str(tmp_path / "chain_ctx.onnx"), providers=[NAME])


def test_groups_without_export_stay_as_nodes(host, tmp_path):
    provider = ContextCompilerProvider(export=False)
    ort_core.register(provider, "context-compiler-no-export")
    path = _save(tmp_path)
    ort_core.InferenceSession(str(path), _options(**{"ep.context_enable": "1"}), providers=[NAME])
    model = onnx.load(tmp_path / "chain_ctx.onnx")
    assert [n.op_type for n in model.graph.node] == ["Add", "Relu", "Mul", "Relu", "Sub"]
    assert [t.name for t in model.graph.initializer] == ["w"]
    sess = ort_core.InferenceSession(str(tmp_path / "chain_ctx.onnx"), providers=[NAME])
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], chain_expected(X), rtol=1e-6)


def test_context_keys_are_checked(compiler, tmp_path):
    path = _save(tmp_path)
    with pytest.raises(ort_core.InvalidArgument, match="ep.context_file_path"):
        ort_core.InferenceSession(chain_model().SerializeToString(), _options(**{"ep.context_enable": "1"}),
                                  providers=[NAME])
    with pytest.raises(ort_core.InvalidArgument, match="ep.context_enable='yes'"):
        ort_core.InferenceSession(str(path), _options(**{"ep.context_enable": "yes"}), providers=[NAME])
    with pytest.raises(ort_core.InvalidArgument, match="input model itself"):
        ort_core.InferenceSession(str(path), _options(**{"ep.context_enable": "1", "ep.context_file_path": str(path)}),
                                  providers=[NAME])


def test_model_compiler_to_file_and_bytes(compiler, tmp_path):
    path = _save(tmp_path)
    so = ort_core.SessionOptions()
    so.add_provider(NAME, {})
    mc = ort_core.ModelCompiler(so, str(path))
    mc.compile_to_file(str(tmp_path / "compiled.onnx"))  # side file: onnxruntime's default embed=False
    assert (tmp_path / f"compiled_{NAME}_0.bin").is_file()
    data = ort_core.ModelCompiler(so, str(path), embed_compiled_data_into_model=True).compile_to_bytes()
    assert compiler.compilations == 2
    for source in (str(tmp_path / "compiled.onnx"), data):
        sess = ort_core.InferenceSession(source, providers=[NAME])
        np.testing.assert_allclose(sess.run(None, {"x": X})[0], chain_expected(X), rtol=1e-6)
    assert compiler.compilations == 2 and compiler.loads == 2
    # the caller's options are not changed by the compiler
    assert "ep.context_enable" not in so.config_entries

    with pytest.raises(ort_core.InvalidArgument, match="exists"):
        ort_core.ModelCompiler(so, str(path), flags=ort_core.OrtCompileApiFlags.ERROR_IF_OUTPUT_FILE_EXISTS
                               ).compile_to_file(str(tmp_path / "compiled.onnx"))


def test_model_compiler_error_if_nothing_compiled(host, tmp_path):
    so = ort_core.SessionOptions()
    so.add_provider("CPUExecutionProvider", {})
    path = _save(tmp_path)
    assert ort_core.ModelCompiler(so, str(path)).compile_to_bytes()  # allowed: nothing to compile
    with pytest.raises(ort_core.EPFail, match="no provider compiled"):
        ort_core.ModelCompiler(so, str(path), flags=ort_core.OrtCompileApiFlags.ERROR_IF_NO_NODES_COMPILED
                               ).compile_to_bytes()


def test_read_context_refuses_other_nodes(compiler, tmp_path):
    model = chain_model()
    sess = ort_core.InferenceSession(model, providers=["CPUExecutionProvider"])
    graph = sess._graph
    request = ort_core.KernelRequest(graph, (graph.nodes[0],), ("x", "w"), ("a",), False)
    with pytest.raises(ort_core.InvalidGraph, match="not a com.microsoft.EPContext node"):
        epcontext.read_context(request)
