"""Bad input gets a clear error that names the thing, and never takes the process down."""

from __future__ import annotations

import os
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort
from conftest import chain_model, make_model
from ort_core import plugins

CPU = "CPUExecutionProvider"


def test_missing_file(host, tmp_path):
    path = tmp_path / "nope.onnx"
    with pytest.raises(ort.NoSuchFile, match="nope.onnx"):
        ort.InferenceSession(str(path))


def test_corrupt_protobuf_bytes(host):
    with pytest.raises(ort.InvalidProtobuf, match="not a valid ONNX model"):
        ort.InferenceSession(b"\x08\x07\x12\xff\xff\xff\xff\x0f garbage")


def test_bytes_that_decode_to_no_model(host):
    with pytest.raises(ort.InvalidProtobuf, match="holds no ONNX model"):
        ort.InferenceSession(b"")


def test_checker_failure_names_the_node(host):
    model = make_model(
        [helper.make_node("Add", ["x"], ["y"], name="lonely_add")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    with pytest.raises(ort.InvalidGraph, match="lonely_add"):
        ort.InferenceSession(model)


def test_shapeless_graph_outputs_run_as_in_onnxruntime(ort_nodes):
    """Graph and subgraph outputs typed without a shape (rank unknown) fail onnx's checker but
    run in onnxruntime; here too, and the checker's other rules still apply to such models."""
    branch = helper.make_graph([helper.make_node("Neg", ["x"], ["b"])], "then", [],
                               [helper.make_tensor_value_info("b", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["c"])], "else", [],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, None)])
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"]),
         helper.make_node("If", ["flag"], ["z"], then_branch=branch, else_branch=other)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
    )
    x = np.array([-1.0, 2.0], dtype=np.float32)
    for source in (model, model.SerializeToString()):
        y, z = ort.InferenceSession(source).run(None, {"x": x, "flag": np.array(True)})
        np.testing.assert_array_equal(y, [0.0, 2.0])
        np.testing.assert_array_equal(z, [1.0, -2.0])
    broken = make_model(
        [helper.make_node("Add", ["x"], ["y"], name="lonely_add")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    with pytest.raises(ort.InvalidGraph, match="lonely_add"):
        ort.InferenceSession(broken)


def test_untyped_graph_outputs_take_their_inferred_types_as_in_onnxruntime(ort_nodes):
    """A graph output with no type at all (``make_empty_tensor_value_info``) fails onnx's
    checker but runs in onnxruntime, which gives it the inferred type; here too. One that onnx's
    inference cannot type but a node produces takes its kernel's output type (ort-ep-cpu's
    ``test_an_untyped_output_of_a_contrib_op_runs_as_in_onnxruntime``); one no node produces is
    an InvalidGraph naming it."""
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Shape", ["y"], ["s"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_empty_tensor_value_info("y"), helper.make_empty_tensor_value_info("s")],
    )
    # an empty TypeProto ("Unrecognized type value case" to the checker) is no type either
    empty = make_model(
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Shape", ["y"], ["s"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_value_info("y", onnx.TypeProto()), helper.make_value_info("s", onnx.TypeProto())],
    )
    for source in (model, model.SerializeToString(), empty):
        session = ort.InferenceSession(source)
        assert [(o.type, o.shape) for o in session.get_outputs()] == [("tensor(float)", [2]), ("tensor(int64)", [1])]
        y, s = session.run(None, {"x": np.array([-1.0, 2.0], dtype=np.float32)})
        np.testing.assert_array_equal(y, [0.0, 2.0])
        np.testing.assert_array_equal(s, [2])
    missing = make_model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]), helper.make_empty_tensor_value_info("nowhere")],
    )
    with pytest.raises(ort.InvalidGraph, match="graph output 'nowhere'"):
        ort.InferenceSession(missing)


def test_nodes_listed_out_of_order_run_as_in_onnxruntime(ort_nodes):
    """A graph whose nodes are not listed in topological order fails onnx's checker, and
    onnxruntime runs it (rapid_table_det's quantized detector, @imgly's float16 ISNet); here the
    nodes are sorted at load (a subgraph's outer-scope reads count), the caller's ModelProto is
    left as it was, and a real cycle is still the checker's error."""
    branch = helper.make_graph([helper.make_node("Add", ["x", "t"], ["b"])], "then", [],
                               [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])])
    model = make_model(
        [helper.make_node("If", ["flag"], ["z"], then_branch=branch, else_branch=branch),  # reads t inside
         helper.make_node("Relu", ["t"], ["y"]),
         helper.make_node("Neg", ["x"], ["t"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])],
    )
    before = model.SerializeToString()
    x = np.array([-1.0, 2.0], dtype=np.float32)
    for source in (model, before):
        y, z = ort.InferenceSession(source).run(None, {"x": x, "flag": np.array(True)})
        np.testing.assert_array_equal(y, [1.0, 0.0])
        np.testing.assert_array_equal(z, [0.0, 0.0])
    assert model.SerializeToString() == before
    cycle = make_model(
        [helper.make_node("Relu", ["t"], ["y"]), helper.make_node("Neg", ["y"], ["t"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    with pytest.raises(ort.InvalidGraph, match="topologically sorted"):
        ort.InferenceSession(cycle)


def test_initializers_not_listed_as_inputs_below_ir_4_run_as_in_onnxruntime(ort_nodes):
    """Below IR version 4 onnx's checker wants every initializer listed as a graph input;
    onnxruntime runs models that do not (its own ``datasets/mul_1.onnx``), and so does ort-core."""
    w = onnx.numpy_helper.from_array(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), "w")
    model = make_model([helper.make_node("Mul", ["x", "w"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], [w], opset=7)
    model.ir_version = 3
    (y,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": np.full((2, 2), 2.0, np.float32)})
    np.testing.assert_array_equal(y, [[2.0, 4.0], [6.0, 8.0]])


def test_type_error_names_the_node(host):
    model = make_model(
        [helper.make_node("Add", ["x", "d"], ["y"], name="mixed_add")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("d", TensorProto.DOUBLE, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    with pytest.raises(ort.InvalidGraph, match="mixed_add"):
        ort.InferenceSession(model)


@pytest.fixture
def sess(host):
    return ort.InferenceSession(chain_model(), providers=[CPU])


def test_missing_input(sess):
    with pytest.raises(ort.InvalidArgument, match="missing input.*'x'"):
        sess.run(None, {})


def test_unknown_input_name(sess):
    with pytest.raises(ort.InvalidArgument, match="unknown input name.*'z'.*inputs are: 'x'"):
        sess.run(None, {"x": np.ones((1, 4), np.float32), "z": np.ones(1)})


def test_wrong_dtype(sess):
    with pytest.raises(ort.InvalidArgument) as info:
        sess.run(None, {"x": np.ones((1, 4), np.float64)})
    assert "input 'x'" in str(info.value)
    assert "expected tensor(float) (float32), given float64" in str(info.value)


def test_wrong_rank(sess):
    with pytest.raises(ort.InvalidArgument, match=r"input 'x': wrong rank: expected 2 \(shape \['N', 4\]\), given 1 \(shape \[4\]\)"):
        sess.run(None, {"x": np.ones(4, np.float32)})


def test_wrong_fixed_dimension(sess):
    with pytest.raises(ort.InvalidArgument, match=r"input 'x': wrong dimension 1: expected 4 .* given 5"):
        sess.run(None, {"x": np.ones((1, 5), np.float32)})


def test_big_endian_input_is_converted(sess):
    """Non-native byte order (np.load or np.frombuffer of network-order data) is converted:
    it was refused (onnxruntime 1.32 reads its bytes as native, so 1.0 becomes 4.6e-41)."""
    x = np.array([[1.0, 2.0, -3.0, 0.5]], np.float32)
    (want,) = sess.run(None, {"x": x})
    (got,) = sess.run(None, {"x": x.astype(">f4")})
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ort.InvalidArgument, match="given >f8"):  # another type is still refused
        sess.run(None, {"x": x.astype(">f8")})


def test_non_str_objects_in_a_string_input_are_their_str(host):
    """ints or None fed to a tensor(string) input reach the graph as their str(), as
    onnxruntime takes them, bytes as their UTF-8 text (onnxruntime: "b'a'"); they reached
    kernels as they were."""
    model = make_model([helper.make_node("Identity", ["s"], ["t"])],
                       [helper.make_tensor_value_info("s", TensorProto.STRING, ["N"])],
                       [helper.make_tensor_value_info("t", TensorProto.STRING, ["N"])])
    session = ort.InferenceSession(model.SerializeToString())
    for feed, want in (([1, 2], ["1", "2"]), (np.array([None, "a"], object), ["None", "a"]),
                       (np.array(["é".encode(), 7], object), ["é", "7"]), (np.array(["x", "y"]), ["x", "y"])):
        (t,) = session.run(None, {"s": feed})
        assert t.dtype == object and t.tolist() == want and all(type(v) is str for v in t)
    # after a run of str elements, another of the same shape holding other objects: checked too
    session.run(None, {"s": np.array(["a", "b"], object)})
    (t,) = session.run(None, {"s": np.array([3, None], object)})
    assert t.tolist() == ["3", "None"]


def test_unknown_output_name(sess):
    with pytest.raises(ort.InvalidArgument, match="unknown output name 'q'.*'y'"):
        sess.run(["q"], {"x": np.ones((1, 4), np.float32)})


def test_unknown_provider_option_names_the_valid_keys(host):
    with pytest.raises(ort.InvalidArgument, match="unknown provider option 'flavor'; valid keys: flavour"):
        ort.InferenceSession(chain_model(), providers=[(CPU, {"flavor": "x"})])


def test_bad_option_value_names_the_valid_values(host):
    with pytest.raises(ort.InvalidArgument, match="bad value 'sour' for option 'flavour'; valid values: plain, spicy"):
        ort.InferenceSession(chain_model(), providers=[CPU], provider_options=[{"flavour": "sour"}])


def test_missing_provider_in_strict_mode_lists_the_available_ones(host):
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    with pytest.raises(ort.NoSuchProvider, match="'CUDAExecutionProvider' is not installed.*available providers: CPUExecutionProvider"):
        ort.InferenceSession(chain_model(), so, providers=["CUDAExecutionProvider"])


def test_no_provider_installed_says_to_install_one(registry):
    with pytest.raises(ort.NoSuchProvider, match="pip install ort-ep-cpu"):
        ort.InferenceSession(chain_model())


def test_kernel_error_at_run_names_the_node(registry):
    class Exploding:
        @ort.hookimpl
        def ort_register_providers(self):
            return [ort.ProviderSpec(CPU, "0", "tests", "kernel")]

        @ort.hookimpl
        def ort_ep_devices(self, provider):
            return ort.EpDevices((ort.EpDevice(CPU, "tests", "CPU", "host"),))

        @ort.hookimpl
        def ort_get_capability(self, ep, graph, candidates):
            return ort.Capability([ort.Claim((i,)) for i in sorted(candidates)])

        @ort.hookimpl
        def ort_create_kernel(self, ep, request):
            def run(*xs):
                if request.node.name == "mul":
                    raise FloatingPointError("overflow in mul")
                return xs[0]

            return ort.Kernel(run=run, single_output=True)

    ort.register(Exploding())
    sess = ort.InferenceSession(chain_model())
    with pytest.raises(ort.Fail, match="running Mul node. Name:'mul' Provider:CPUExecutionProvider.*overflow in mul"):
        sess.run(None, {"x": np.ones((1, 4), np.float32)})


def _external_model(tmp_path, location: str) -> str:
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    model = make_model(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [w],
    )
    onnx.external_data_helper.convert_model_to_external_data(model, location="weights.bin", size_threshold=0)
    folder = tmp_path / "model"
    folder.mkdir()
    onnx.save(model, str(folder / "model.onnx"))
    # rewrite the location afterwards: onnx itself refuses to write outside the folder
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = location
    onnx.save(model, str(folder / "model.onnx"))
    return str(folder / "model.onnx")


def test_external_data_inside_the_folder_loads(host, tmp_path):
    sess = ort.InferenceSession(_external_model(tmp_path, "weights.bin"))
    (y,) = sess.run(None, {"x": np.ones(4, np.float32)})
    np.testing.assert_array_equal(y, np.arange(4) + 1)


def test_external_data_of_a_model_given_as_bytes_is_read_from_the_working_directory(host, tmp_path, monkeypatch):
    # as onnxruntime resolves it (it was refused here); the folder's bounds still hold
    path = _external_model(tmp_path, "weights.bin")
    data = open(path, "rb").read()
    monkeypatch.chdir(os.path.dirname(path))
    (y,) = ort.InferenceSession(data).run(None, {"x": np.ones(4, np.float32)})
    np.testing.assert_array_equal(y, np.arange(4) + 1)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ort.NoSuchFile, match="external data file not found"):
        ort.InferenceSession(data)


def test_external_data_escaping_the_folder_is_refused(host, tmp_path):
    (tmp_path / "secret.bin").write_bytes(b"\0" * 16)
    path = _external_model(tmp_path, "../secret.bin")
    with pytest.raises(ort.InvalidGraph, match=r"external data path '../secret.bin' escapes the model's folder"):
        ort.InferenceSession(path)


def test_external_data_absolute_path_is_refused(host, tmp_path):
    path = _external_model(tmp_path, str(tmp_path / "secret.bin"))
    with pytest.raises(ort.InvalidGraph, match="escapes the model's folder"):
        ort.InferenceSession(path)


def _fake_distribution(tmp_path, name: str, module: str, source: str, entry: str):
    """A distribution on sys.path with an entry point, as pip would install it."""
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
    info = tmp_path / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[ort_core.plugins]\n{entry} = {module}\n")


def test_plugin_whose_import_raises_is_reported_and_others_keep_working(tmp_path, monkeypatch):
    _fake_distribution(tmp_path, "ort-ep-broken", "ort_ep_broken_plugin", "raise ImportError('libbroken.so: cannot open shared object file')\n", "broken")
    _fake_distribution(tmp_path, "ort-ep-fine", "ort_ep_fine_plugin", """
        import numpy as np
        import ort_core as ort

        @ort.hookimpl
        def ort_register_providers():
            return [ort.ProviderSpec("FineExecutionProvider", "1.0", "tests", "kernel")]

        @ort.hookimpl
        def ort_ep_devices(provider):
            return ort.EpDevices((ort.EpDevice(provider, "tests", "CPU", "host"),))

        @ort.hookimpl
        def ort_get_capability(ep, graph, candidates):
            return ort.Capability([ort.Claim((i,)) for i in sorted(candidates)])

        @ort.hookimpl
        def ort_create_kernel(ep, request):
            return ort.Kernel(run=np.negative, single_output=True)
        """, "fine")
    monkeypatch.syspath_prepend(str(tmp_path))
    fresh = plugins.PluginRegistry()
    monkeypatch.setattr(plugins, "_REGISTRY", fresh)
    failures = [f for f in ort.plugin_failures() if f.package == "ort-ep-broken"]
    assert len(failures) == 1
    assert failures[0].error == "import failed: ImportError: libbroken.so: cannot open shared object file"
    assert "FineExecutionProvider" in ort.get_available_providers()
    model = make_model(
        [helper.make_node("Neg", ["x"], ["y"], name="neg")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    sess = ort.InferenceSession(model, providers=["FineExecutionProvider"])
    np.testing.assert_array_equal(sess.run(None, {"x": np.array([1, -2], np.float32)})[0], [-1, 2])
    sys.modules.pop("ort_ep_fine_plugin", None)


def test_plugin_for_another_contract_version_is_refused_by_name(registry):
    class Future:
        @ort.hookimpl
        def ort_register_providers(self):
            return [ort.ProviderSpec("FutureExecutionProvider", "9.0", "tests", "kernel", contract_version="2.0")]

    assert not ort.register(Future(), "future-plugin")
    (failure,) = ort.plugin_failures()
    assert failure.plugin == "future-plugin"
    assert "FutureExecutionProvider was written for provider contract 2.0" in failure.error
    assert f"implements contract {ort.CONTRACT_VERSION}" in failure.error


def test_providers_argument_forms(host):
    with pytest.raises(ort.InvalidArgument, match="must be a list"):
        ort.InferenceSession(chain_model(), providers=CPU)
    with pytest.raises(ort.InvalidArgument, match="provider_options has 2"):
        ort.InferenceSession(chain_model(), providers=[CPU], provider_options=[{}, {}])
    # onnxruntime warns and keeps the first: [choice, "CPUExecutionProvider"] with choice the CPU
    with pytest.warns(UserWarning, match=f"Duplicate provider '{CPU}' encountered, ignoring"):
        session = ort.InferenceSession(chain_model(), providers=[CPU, (CPU, {"flavour": "spicy"})])
    assert session.get_providers() == [CPU] and session.get_provider_options()[CPU] != {"flavour": "spicy"}


def test_core_alone_says_to_install_a_provider():
    """In ort-core's own venv (nox tests-ort-core) no provider is installed: the real registry,
    loading the real entry points, must say so and name the package to install."""
    if ort.registry().providers():
        pytest.skip("providers are installed in this environment; covered with an empty registry above")
    with pytest.raises(ort.NoSuchProvider, match="no execution provider is installed.*pip install ort-ep-cpu"):
        ort.InferenceSession(chain_model())


def test_models_onnxruntime_fails_are_fail_and_invalid_graph(host):
    """Where onnxruntime answers FAIL (a type clash between nodes, two nodes writing one name,
    a graph output no node makes, an opset or IR version it does not know), the error is an
    InvalidGraph that ``except Fail`` (onnxruntime's class) catches too."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    clash = make_model([helper.make_node("Add", ["x", "n"], ["z"])],
                       [x, helper.make_tensor_value_info("n", TensorProto.INT64, [2])],
                       [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])])
    twice = make_model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["y"])], [x],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    unmade = make_model([helper.make_node("Relu", ["x"], ["y"])], [x],
                        [helper.make_tensor_value_info("w", TensorProto.FLOAT, [2])])
    new_opset = make_model([helper.make_node("Relu", ["x"], ["y"])], [x],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], opset=99)
    for model in (clash, twice, unmade, new_opset):
        with pytest.raises(ort.capi.onnxruntime_pybind11_state.Fail) as info:
            ort.InferenceSession(model.SerializeToString(), providers=[CPU])
        assert isinstance(info.value, ort.InvalidGraph)
