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


def _compiling_options() -> ort_core.SessionOptions:
    so = ort_core.SessionOptions()
    so.add_provider(NAME, {})
    return so


def _runs(source, **kwargs) -> None:
    sess = ort_core.InferenceSession(source, providers=[NAME], **kwargs)
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], chain_expected(X), rtol=1e-6)


def test_model_compiler_to_a_stream_gives_the_bytes(compiler, tmp_path):
    path = _save(tmp_path)
    chunks: list[bytes] = []
    mc = ort_core.ModelCompiler(_compiling_options(), str(path), embed_compiled_data_into_model=True)
    mc.compile_to_stream(chunks.append)
    assert all(isinstance(c, bytes) for c in chunks)
    assert b"".join(chunks) == mc.compile_to_bytes()
    _runs(b"".join(chunks))
    with pytest.raises(ort_core.Fail, match="write function raised: ZeroDivisionError"):
        mc.compile_to_stream(lambda data: 1 / 0)
    with pytest.raises(ort_core.InvalidArgument, match="needs a callable"):
        mc.compile_to_stream(5)


def test_model_compiler_puts_side_files_where_the_binary_information_says(compiler, tmp_path):
    path = _save(tmp_path)
    mc = ort_core.ModelCompiler(_compiling_options(), str(path))
    for directory, name, error in (("", "m", "empty"), (str(tmp_path), "", "empty"),
                                   (str(tmp_path / "bins"), "m", "not a valid directory")):
        with pytest.raises(ort_core.InvalidArgument, match=error):
            mc.set_ep_context_binary_information(directory, name)
    assert not list(tmp_path.glob("*.bin"))
    # without a place for them the bytes embed every blob, as before
    assert onnx.helper.get_attribute_value(
        onnx.load_from_string(mc.compile_to_bytes()).graph.node[0].attribute[1]) is not None
    assert not list(tmp_path.rglob("*.bin"))
    mc.set_ep_context_binary_information(str(tmp_path / "bins") + "/", "model.onnx")
    data = mc.compile_to_bytes()
    side = tmp_path / "bins" / f"model_{NAME}_0.bin"
    assert side.read_bytes().startswith(b"TESTCTX1")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in onnx.load_from_string(data).graph.node[0].attribute}
    assert attrs["embed_mode"] == 0 and attrs["ep_cache_context"] == side.name.encode()
    (tmp_path / "bins" / "model.onnx").write_bytes(data)
    _runs(str(tmp_path / "bins" / "model.onnx"))
    assert compiler.loads == 1


def test_model_compiler_gives_side_files_to_the_data_write_function(compiler, tmp_path):
    """The blobs go to the callback (read in chunks) instead of files, and a session reads them
    back through ``set_ep_context_data_read_func`` by the name the node records."""
    path = _save(tmp_path)
    written: dict[str, bytes] = {}
    views = []

    def write(name, data):
        views.append(data)
        written[name] = b"".join(data.read(k, min(5, data.size - k)) for k in range(0, data.size, 5))
        with pytest.raises(ort_core.InvalidArgument, match="outside"):
            data.read(data.size, 1)

    mc = ort_core.ModelCompiler(_compiling_options(), str(path))
    mc.set_ep_context_data_write_func(write)
    mc.compile_to_file(str(tmp_path / "compiled.onnx"))
    assert list(written) == [f"compiled_{NAME}_0.bin"] and written[f"compiled_{NAME}_0.bin"].startswith(b"TESTCTX1")
    assert not list(tmp_path.glob("*.bin"))
    with pytest.raises(ort_core.InvalidArgument, match="only during its write callback"):
        views[0].read()
    data = mc.compile_to_bytes()  # not embedded either: the callback has a place for them

    def read(name, buffer):
        buffer.allocate(len(written[name]))
        buffer.write(written[name])

    so = ort_core.SessionOptions()
    so.set_ep_context_data_read_func(read, 1 << 20)
    _runs(str(tmp_path / "compiled.onnx"), sess_options=so)
    _runs(data, sess_options=so)
    mc.set_ep_context_data_write_func(lambda name, data: 1 / 0)
    with pytest.raises(ort_core.Fail, match=f"write function raised on 'model_{NAME}_0.bin': ZeroDivisionError"):
        mc.compile_to_bytes()
    mc.clear_ep_context_data_write_func()
    _runs(mc.compile_to_bytes())  # embedded again
    with pytest.raises(ort_core.InvalidArgument, match="needs a callable"):
        mc.set_ep_context_data_write_func("f")


def _weights_model() -> onnx.ModelProto:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 16)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([2.0], np.float32), "s")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Mul", ["a", "s"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_model_compiler_places_initializers_where_the_location_function_says(ort_nodes, tmp_path):
    """As onnxruntime: the function is asked about each initializer by name with its value;
    what it places (having written the bytes) is read from its file, the rest stays inline;
    an initializer already external in the input model comes with its location."""
    model = _weights_model()
    path = tmp_path / "in.onnx"
    onnx.save(model, path, save_as_external_data=True, location="in.bin", size_threshold=100)
    so = ort_core.SessionOptions()
    so.add_provider("CPUExecutionProvider", {})
    asked = []
    file = open(tmp_path / "mine.bin", "wb")  # noqa: SIM115  (written by the callback)

    def locate(name, value, info):
        asked.append((name, value.shape(), info))
        if value.tensor_size_in_bytes() < 64:
            return None
        offset = file.tell()
        file.write(value.numpy().tobytes())
        return ort_core.OrtExternalInitializerInfo("mine.bin", offset, value.tensor_size_in_bytes())

    ort_core.ModelCompiler(so, str(path), get_initializer_location_func=locate).compile_to_file(str(tmp_path / "out.onnx"))
    file.close()
    assert [(n, s) for n, s, _ in asked] == [("b", [16]), ("s", [1]), ("w", [4, 16])]
    assert [i for _, _, i in asked] == [None, None, ort_core.OrtExternalInitializerInfo("in.bin", 0, 256)]
    out = onnx.load(tmp_path / "out.onnx", load_external_data=False)
    where = {t.name: {e.key: e.value for e in t.external_data} for t in out.graph.initializer}
    assert where == {"b": {"location": "mine.bin", "offset": "0", "length": "64"},
                     "w": {"location": "mine.bin", "offset": "64", "length": "256"}, "s": {}}
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    want = ort_core.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort_core.InferenceSession(str(tmp_path / "out.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)

    # returning the input's own location keeps the initializer where it was
    keep = ort_core.ModelCompiler(so, str(path), get_initializer_location_func=lambda n, v, info: info)
    keep.compile_to_file(str(tmp_path / "kept.onnx"))
    kept = onnx.load(tmp_path / "kept.onnx", load_external_data=False)
    assert [(t.name, t.data_location) for t in kept.graph.initializer] == [("w", 1), ("b", 0), ("s", 0)]
    with pytest.raises(ValueError, match="both `external_initializers_file_path` and `get_initializer_location_func`"):
        ort_core.ModelCompiler(so, str(path), external_initializers_file_path="e.bin",
                               get_initializer_location_func=locate)
    with pytest.raises(ort_core.InvalidArgument, match="returned str for initializer 'b'"):
        ort_core.ModelCompiler(so, str(path), get_initializer_location_func=lambda n, v, i: "x").compile_to_bytes()
    with pytest.raises(ort_core.Fail, match="raised on initializer 'b': KeyError"):
        ort_core.ModelCompiler(so, str(path), get_initializer_location_func=lambda n, v, i: {}[n]).compile_to_bytes()
    with pytest.raises(ort_core.InvalidArgument, match="must not be negative"):
        ort_core.OrtExternalInitializerInfo("a", -1, 2)
