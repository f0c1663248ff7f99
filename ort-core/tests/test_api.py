"""The public API: names and behaviour as onnxruntime's Python API."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort
from conftest import chain_expected, chain_model, make_model
from ort_core import cli

CPU = "CPUExecutionProvider"


def test_module_functions(host, fake):
    assert ort.get_version_string() == ort.__version__
    assert ort.get_available_providers() == ["FakeDeviceExecutionProvider", CPU]
    assert ort.get_all_providers()[-1] == CPU
    assert "FakeDeviceExecutionProvider" in ort.get_all_providers()
    assert "CUDAExecutionProvider" in ort.get_all_providers()
    devices = {d.ep_name: d for d in ort.get_ep_devices()}
    assert devices["FakeDeviceExecutionProvider"].memory == "Fake:0"
    assert ort.get_device() == "GPU"


def test_exceptions_share_one_base_class():
    for cls in (ort.Fail, ort.InvalidArgument, ort.NoSuchFile, ort.InvalidProtobuf,
                ort.InvalidGraph, ort.NotImplemented, ort.EPFail, ort.RuntimeException):
        assert issubclass(cls, ort.OrtError)


def test_exceptions_import_from_onnxruntimes_module_path(tmp_path):
    """``from onnxruntime.capi.onnxruntime_pybind11_state import ...`` becomes ort_core's: the same
    names, the classes ort-core raises."""
    import onnxruntime.capi.onnxruntime_pybind11_state as onnxruntime_state

    from ort_core import errors
    from ort_core.capi import _pybind_state
    from ort_core.capi import onnxruntime_pybind11_state as state

    status_only = ("EngineError", "ModelLoaded", "NotFound", "ModelRequiresCompilation")  # (never raised here)
    for name in state.__all__:
        assert getattr(state, name) is getattr(ort, name, None) or name in status_only
        assert getattr(_pybind_state, name) is getattr(state, name)  # (onnxruntime's capi._pybind_state)
        assert hasattr(onnxruntime_state, name), name  # (a name onnxruntime has)
    for name in status_only:
        assert getattr(state, name) is getattr(errors, name)
    assert {"OrtValue", "SessionOptions", "get_available_providers", "EngineError", "OrtEpDevice",
            "get_ep_devices", "set_seed"} <= set(state.__all__)
    with pytest.raises(state.NoSuchFile):
        ort.InferenceSession(str(tmp_path / "missing.onnx"))


def test_capi_modules_are_attributes_of_the_package(tmp_path):
    """``except ort.capi.onnxruntime_pybind11_state.X:`` works without an import of the
    submodule (as after ``import onnxruntime``): the clause is evaluated while the error is in
    flight, and an AttributeError there lost the error. The submodules resolve in a fresh
    process that imported only ``ort_core``."""
    code = (
        "import sys, ort_core as ort\n"
        "try:\n"
        f"    ort.InferenceSession({str(tmp_path / 'missing.onnx')!r})\n"
        "except ort.capi.onnxruntime_pybind11_state.InvalidArgument:\n"
        "    print('wrong class')\n"
        "except ort.capi.onnxruntime_pybind11_state.NoSuchFile:\n"
        "    print('caught')\n"
        "print(ort.capi.build_and_package_info.__version__ == ort.__version__)\n"
        "print(ort.capi.onnxruntime_inference_collection.Session is ort.InferenceSession)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["caught", "True", "True"], result.stderr


def test_inference_collection_module_names():
    """``onnxruntime.capi.onnxruntime_inference_collection``'s classes and helpers, as ort-core's."""
    import onnxruntime.capi.onnxruntime_inference_collection as onnxruntime_collection

    from ort_core.capi import onnxruntime_inference_collection as collection

    for name in collection.__all__:
        assert hasattr(onnxruntime_collection, name), name
    assert collection.OrtValue is ort.OrtValue and collection.IOBinding is ort.IOBinding
    assert collection.get_ort_device_type("cpu") == onnxruntime_collection.get_ort_device_type("cpu")
    available = ["CPUExecutionProvider"]
    for providers, options in (([("CPUExecutionProvider", {"a": 1})], None), (["CPUExecutionProvider"], [{"b": 2.5}]),
                               (["CPUExecutionProvider", "CPUExecutionProvider"], None), (None, None)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert collection.check_and_normalize_provider_args(providers, options, available) == \
                onnxruntime_collection.check_and_normalize_provider_args(providers, options, available)
    for bad in ((["CPUExecutionProvider"], [{}, {}]), ([("CPUExecutionProvider", 3)], None)):
        with pytest.raises(ValueError):
            collection.check_and_normalize_provider_args(*bad, available)


def test_session_metadata(host):
    model = chain_model()
    model.doc_string = "a chain"
    model.model_version = 3
    onnx.helper.set_model_props(model, {"author": "tests"})
    sess = ort.InferenceSession(model.SerializeToString())
    (x,) = sess.get_inputs()
    assert (x.name, x.type, x.shape) == ("x", "tensor(float)", ["N", 4])
    (y,) = sess.get_outputs()
    assert (y.name, y.type, y.shape) == ("y", "tensor(float)", ["N", 4])
    assert sess.get_providers() == [CPU]
    assert sess.get_provider_options() == {CPU: {"flavour": "plain"}}
    meta = sess.get_modelmeta()
    assert (meta.producer_name, meta.description, meta.version) == ("tests", "a chain", 3)
    assert meta.custom_metadata_map == {"author": "tests"}
    assert sess.get_session_options().graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL


def test_values_onnxruntime_gives_where_the_model_or_caller_sets_none(host):
    """As onnxruntime 1.32 answers them (measured side by side): a model without
    ``model_version`` reports INT64_MAX; the log severities default to -1 (the default
    logger's); an OrtValue's element type is the ONNX enum; the enums print with their names."""
    import onnxruntime

    model = chain_model()
    model.ClearField("model_version")
    data = model.SerializeToString()
    ours = ort.InferenceSession(data).get_modelmeta().version
    assert ours == onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).get_modelmeta().version
    assert ours == 2**63 - 1
    for options in ("SessionOptions", "RunOptions"):
        assert getattr(ort, options)().log_severity_level == getattr(onnxruntime, options)().log_severity_level == -1
    x = np.zeros(2, np.int64)
    assert ort.OrtValue.ortvalue_from_numpy(x).element_type() == onnxruntime.OrtValue.ortvalue_from_numpy(x).element_type()
    assert ort.OrtValue.ortvalue_from_numpy(x).element_type() == onnx.TensorProto.INT64
    for enum in ("GraphOptimizationLevel", "ExecutionMode", "ExecutionOrder"):
        for member in getattr(ort, enum):
            assert str(member) == str(getattr(getattr(onnxruntime, enum), member.name))


def test_provider_options_forms_are_equivalent(host):
    a = ort.InferenceSession(chain_model(), providers=[(CPU, {"flavour": "spicy"})])
    b = ort.InferenceSession(chain_model(), providers=[CPU], provider_options=[{"flavour": "spicy"}])
    assert a.get_provider_options() == b.get_provider_options() == {CPU: {"flavour": "spicy"}}


def test_overridable_initializers(host):
    w = numpy_helper.from_array(np.full(2, 10, np.float32), "w")
    model = make_model(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [w],
    )
    sess = ort.InferenceSession(model, sess_options=_no_opt())
    assert [a.name for a in sess.get_inputs()] == ["x"]
    assert [a.name for a in sess.get_overridable_initializers()] == ["w"]
    x = np.ones(2, np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], [11, 11])
    np.testing.assert_array_equal(sess.run(None, {"x": x, "w": np.zeros(2, np.float32)})[0], [1, 1])


def test_initializers_listed_as_inputs_below_ir_4_are_constants(host):
    # IR 3 lists every initializer among the graph inputs; onnxruntime holds them constant
    # (not overridable, and feeding one is an invalid input name), so they fold: the Mul of two
    # initializers here leaves one Add
    w = numpy_helper.from_array(np.full(2, 10, np.float32), "w")
    two = numpy_helper.from_array(np.full(2, 2, np.float32), "two")
    model = make_model(
        [helper.make_node("Mul", ["w", "two"], ["w2"]), helper.make_node("Add", ["x", "w2"], ["y"])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2]) for name in ("x", "w", "two")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [w, two],
    )
    model.ir_version = 3
    sess = ort.InferenceSession(model)
    assert [a.name for a in sess.get_inputs()] == ["x"]
    assert sess.get_overridable_initializers() == []
    assert [n.op_type for n in sess.get_placement().nodes] == ["Add"]
    x = np.ones(2, np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], [21, 21])
    with pytest.raises(ort.InvalidArgument, match="unknown input name.*'w'"):
        sess.run(None, {"x": x, "w": np.zeros(2, np.float32)})


def test_disabled_optimizers_take_onnxruntimes_names(host):
    # Mul of two initializers: folded unless ConstantFolding is disabled (onnxruntime's name);
    # a name no optimization here has is a warning, as onnxruntime ignores it
    w = numpy_helper.from_array(np.full(2, 10, np.float32), "w")
    two = numpy_helper.from_array(np.full(2, 2, np.float32), "two")
    model = make_model(
        [helper.make_node("Mul", ["w", "two"], ["w2"]), helper.make_node("Add", ["x", "w2"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [w, two])
    assert [n.op_type for n in ort.InferenceSession(model).get_placement().nodes] == ["Add"]
    kept = ort.InferenceSession(model, disabled_optimizers=["ConstantFolding"])
    assert [n.op_type for n in kept.get_placement().nodes] == ["Mul", "Add"]
    kept.set_providers(kept.get_providers())
    assert [n.op_type for n in kept.get_placement().nodes] == ["Mul", "Add"]
    with pytest.warns(UserWarning, match="no optimization here is named NoSuchFusion"):
        ort.InferenceSession(model, disabled_optimizers=["NoSuchFusion"])


def test_session_options_refuse_unknown_names_and_wrong_types():
    so = ort.SessionOptions()
    with pytest.raises(AttributeError, match="no attribute 'intra_op_thread'.*intra_op_num_threads"):
        so.intra_op_thread = 2
    with pytest.raises(TypeError, match="intra_op_num_threads takes an int"):
        so.intra_op_num_threads = "2"
    with pytest.raises(TypeError, match="graph_optimization_level takes a GraphOptimizationLevel"):
        so.graph_optimization_level = 5
    with pytest.raises(ort.InvalidArgument, match="log_severity_level is 9"):
        so.log_severity_level = 9
    so.graph_optimization_level = 1  # a member's number is taken, as the enum
    assert so.graph_optimization_level is ort.GraphOptimizationLevel.ORT_ENABLE_BASIC


def test_node_args_as_onnxruntime_reports_them(host):
    # an unknown shape is [], a dimension nothing names None (onnx's inference says unk__0)
    model = make_model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Relu", ["z"], ["w"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", None, 4]),
                        helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                        helper.make_tensor_value_info("w", TensorProto.FLOAT, None)])
    session = ort.InferenceSession(model)
    assert [(a.name, a.type, a.shape) for a in session.get_inputs() + session.get_outputs()] == [
        ("x", "tensor(float)", ["batch", None, 4]), ("z", "tensor(float)", []),
        ("y", "tensor(float)", ["batch", None, 4]), ("w", "tensor(float)", [])]
    session.get_inputs()[0].shape[0] = 1  # each call's own list, as onnxruntime's
    assert session.get_inputs()[0].shape == ["batch", None, 4]
    assert ort.OrtSparseFormat.ORT_SPARSE_COO.name == "ORT_SPARSE_COO"
    assert [m.name for m in ort.OrtCompileApiFlags][:1] == ["ERROR_IF_NO_NODES_COMPILED"]


def test_onnx_element_type_numbers_make_ortvalues():
    value = ort.OrtValue.ortvalue_from_shape_and_type([2], TensorProto.FLOAT16)
    assert value.data_type() == "tensor(float16)" and value.shape() == [2]
    assert ort.OrtValue(np.zeros(1, np.int64)).data_type() == "tensor(int64)"
    assert ort.OrtValue([np.zeros(2, np.float32)]).data_type() == "seq(tensor(float))"
    assert ort.OrtValue([{1: np.float32(0.5)}]).data_type() == "seq(map(int64,tensor(float)))"


def test_a_session_leaves_the_default_logger_severity_alone(host):
    import logging

    ort.set_default_logger_severity(3)  # the usual way to silence onnxruntime
    try:
        ort.InferenceSession(chain_model())  # log_severity_level -1: the default logger's
        assert logging.getLogger("ort_core").level == logging.ERROR
        verbose = ort.SessionOptions()
        verbose.log_severity_level = 1  # a session's own severity sets the level (for the process)
        ort.InferenceSession(chain_model(), verbose)
        assert logging.getLogger("ort_core").level == logging.INFO
        with pytest.raises(ort.InvalidArgument, match="7 is not a severity"):
            ort.set_default_logger_severity(7)
    finally:
        ort.set_default_logger_severity(2)


def test_optimization_levels_are_onnxruntimes(host):
    import onnxruntime

    assert {m.name: int(m) for m in ort.GraphOptimizationLevel} == {
        name: int(v) for name, v in onnxruntime.GraphOptimizationLevel.__members__.items()}
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_LAYOUT  # the extended passes
    np.testing.assert_array_equal(ort.InferenceSession(chain_model(), so).run(None, {"x": np.ones((1, 4), np.float32)})[0],
                                  chain_expected(np.ones((1, 4), np.float32)))


def _no_opt() -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return options


def test_output_names_select_and_order(host):
    model = make_model(
        [helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Relu", ["x"], ["r"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("n", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, [2])],
    )
    sess = ort.InferenceSession(model)
    x = np.array([-1, 2], np.float32)
    r, n = sess.run(["r", "n"], {"x": x})
    np.testing.assert_array_equal(r, [0, 2])
    np.testing.assert_array_equal(n, [1, -2])


def test_run_options_terminate(host):
    sess = ort.InferenceSession(chain_model())
    options = ort.RunOptions()
    options.terminate = True
    # onnxruntime's class (Fail) and words: a handler written for it catches this one
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.Fail, match="terminate flag"):
        sess.run(None, {"x": np.ones((1, 4), np.float32)}, options)


def test_concurrent_runs_on_one_session_are_correct(host, fake):
    sess = ort.InferenceSession(chain_model(), providers=["FakeDeviceExecutionProvider", CPU])
    errors: list[str] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(50):
            x = rng.standard_normal((rng.integers(1, 9), 4)).astype(np.float32)
            (y,) = sess.run(None, {"x": x})
            if not np.allclose(y, chain_expected(x), rtol=1e-6):
                errors.append(f"thread {seed}: wrong result")

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_profiling_writes_a_chrome_trace(host, tmp_path):
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / "prof_")
    sess = ort.InferenceSession(chain_model(), options)
    sess.run(None, {"x": np.ones((1, 4), np.float32)})
    path = sess.end_profiling()
    with open(path) as f:
        events = json.load(f)
    nodes = [e for e in events if e["cat"] == "Node"]
    assert [e["name"] for e in nodes] == [f"{n}_kernel_time" for n in ("add", "relu1", "mul", "relu2", "sub")]
    assert all(e["args"]["provider"] == CPU for e in nodes)
    # creation's events, as onnxruntime's: loading (from bytes here), within the initialization
    session = {e["name"]: e for e in events if e["cat"] == "Session"}
    assert {"model_loading_array", "session_initialization", "model_run"} <= set(session)
    loading, init = session["model_loading_array"], session["session_initialization"]
    assert 0 <= init["ts"] <= loading["ts"] and loading["ts"] + loading["dur"] <= init["ts"] + init["dur"]
    assert init["ts"] + init["dur"] <= session["model_run"]["ts"]
    # onnxruntime's file name (prefix, _, date, time, milliseconds); profiling then stops
    assert re.fullmatch(r"prof__\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_\d{3}\.json", os.path.basename(path))
    assert sess.end_profiling() == ""


def test_end_profiling_during_a_run_ends_it_cleanly(host, tmp_path):
    # end_profiling from another thread while a run is in flight: the run's record is dropped
    # (profiling ended), the run still returns (it appended to an ended profile: AttributeError)
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / "prof")
    sess = ort.InferenceSession(chain_model(), options)
    plan_run = sess._plan.run
    ended = []

    def run_ending_the_profile(*args, **kwargs):
        ended.append(sess.end_profiling())
        return plan_run(*args, **kwargs)

    sess._plan.run = run_ending_the_profile
    x = np.ones((1, 4), np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], chain_expected(x))
    assert ended[0].endswith(".json") and sess.end_profiling() == ""
    # wall-clock nanoseconds since the epoch, as onnxruntime 1.32 tells it (within a minute of now)
    assert abs(sess.get_profiling_start_time_ns() - time.time_ns()) < 60e9
    assert ort.InferenceSession(chain_model()).get_profiling_start_time_ns() == 0


def test_get_session_options_is_a_snapshot(host):
    """onnxruntime keeps the options a session was made with: later changes to the caller's
    object reach neither get_session_options() nor set_providers()."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.add_session_config_entry("session.a", "1")
    sess = ort.InferenceSession(chain_model(), so, providers=[CPU])
    so.intra_op_num_threads = 3
    so.add_session_config_entry("session.a", "2")
    kept = sess.get_session_options()
    assert kept is not so and kept.intra_op_num_threads == 2 and kept.get_session_config_entry("session.a") == "1"
    sess.set_providers([CPU])
    assert sess.get_session_options().intra_op_num_threads == 2


def test_optimized_model_filepath_writes_the_optimized_model(host, tmp_path):
    model = make_model(
        [helper.make_node("Identity", ["x"], ["i"]), helper.make_node("Neg", ["i"], ["y"]),
         helper.make_node("Relu", ["x"], ["unused"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(tmp_path / "opt.onnx")
    ort.InferenceSession(model, options)
    written = onnx.load(str(tmp_path / "opt.onnx"))
    assert [n.op_type for n in written.graph.node] == ["Neg"]


def test_cli_providers_and_placement(host, fake, tmp_path, capsys):
    path = tmp_path / "chain.onnx"
    onnx.save(chain_model(), str(path))
    assert cli.main(["providers"]) == 0
    out = capsys.readouterr().out
    assert "FakeDeviceExecutionProvider 0.0.1 ((in-process), kernel) - usable" in out
    assert "memory Fake:0" in out
    assert "        metadata: driver=fake 1.0" in out  # the device's ep_metadata, as onnxruntime's OrtEpDevice has
    assert cli.main(["placement", str(path), "--providers", "FakeDeviceExecutionProvider,CPUExecutionProvider"]) == 0
    out = capsys.readouterr().out
    assert "mul Mul -> CPUExecutionProvider" in out
    assert "FakeDeviceExecutionProvider declined: Mul is not supported by the fake device" in out
    assert "copy r1: Fake:0 -> Cpu" in out
    assert cli.main(["run", str(path), "--batch", "3", "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    assert "output y: shape [3, 4] float32" in out
    assert "placement: CPUExecutionProvider 5/5" in out


def test_cli_reports_errors_without_a_traceback(host, tmp_path, capsys):
    assert cli.main(["run", str(tmp_path / "missing.onnx")]) == 2
    assert "NoSuchFile" in capsys.readouterr().err


def test_negative_dimension_in_an_input_means_unknown(host):
    model = make_model(
        [helper.make_node("Neg", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 2])],
    )
    sess = ort.InferenceSession(model)
    assert sess.get_inputs()[0].shape == [None, 2]
    assert sess.run(None, {"x": np.ones((3, 2), np.float32)})[0].shape == (3, 2)


def test_enums_print_as_onnxruntimes():
    """onnxruntime's C-extension enums print ``Type.NAME`` (an IntEnum prints its number on
    Python 3.11+), the same names and values."""
    import onnxruntime

    for name in ("GraphOptimizationLevel", "ExecutionMode", "ExecutionOrder", "OrtHardwareDeviceType",
                 "OrtDeviceMemoryType", "OrtMemType", "OrtAllocatorType", "OrtMemoryInfoDeviceType", "OrtSparseFormat",
                 "OrtExecutionProviderDevicePolicy", "OrtCompileApiFlags"):
        ours, theirs = getattr(ort, name), getattr(onnxruntime, name)
        for member_name, member in theirs.__members__.items():
            if member_name in ours.__members__:
                assert str(ours[member_name]) == str(member) and int(ours[member_name]) == int(member)


def test_node_args_of_optional_tensors_have_the_tensors_shape(ort_nodes):
    """onnxruntime gives an optional(tensor)'s NodeArg the tensor's shape (it was [])."""
    optional = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, ["N", 2]))
    model = make_model([helper.make_node("OptionalHasElement", ["o"], ["b"])], [helper.make_value_info("o", optional)],
                       [helper.make_tensor_value_info("b", TensorProto.BOOL, [])], opset=18)
    (o,) = ort.InferenceSession(model.SerializeToString()).get_inputs()
    assert (o.type, o.shape) == ("optional(tensor(float))", ["N", 2])


def test_read_config_from_model_sets_the_session_options(host, monkeypatch):
    """onnxruntime's ``read_config_from_model=1`` (or ORT_LOAD_CONFIG_FROM_MODEL=1): session
    options from the model's "ort_config" metadata JSON; off by default; a value that is no
    integer is an InvalidArgument naming it. Unknown keywords are warned about and ignored, as
    onnxruntime ignores them (they raised)."""
    model = chain_model()
    onnx.helper.set_model_props(model, {"ort_config": json.dumps({"session_options": {
        "intra_op_num_threads": 1, "graph_optimization_level": 1, "enable_profiling": 1, "unknown_key": 3}})})
    data = model.SerializeToString()
    plain = ort.InferenceSession(data, providers=[CPU]).get_session_options()
    assert (plain.intra_op_num_threads, plain.graph_optimization_level) == (0, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    for sess in (ort.InferenceSession(data, providers=[CPU], read_config_from_model=1),
                 (monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", "1"), ort.InferenceSession(data, providers=[CPU]))[1]):
        options = sess.get_session_options()
        assert options.intra_op_num_threads == 1
        assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        assert options.enable_profiling and sess.get_profiling_start_time_ns() > 0
        os.remove(sess.end_profiling())
    monkeypatch.delenv("ORT_LOAD_CONFIG_FROM_MODEL")
    onnx.helper.set_model_props(model, {"ort_config": json.dumps({"session_options": {"intra_op_num_threads": "2"}})})
    with pytest.raises(ort.InvalidArgument, match="intra_op_num_threads .* must be an integer"):
        ort.InferenceSession(model.SerializeToString(), providers=[CPU], read_config_from_model=1)
    with pytest.warns(UserWarning, match="ignoring unknown keyword arguments 'nonsense'"):
        ort.InferenceSession(data, providers=[CPU], nonsense=1)


def test_unknown_provider_names_in_set_providers_and_add_provider_raise(host):
    """onnxruntime raises "Unknown Provider Type" for a name it does not know in set_providers
    and SessionOptions.add_provider (they warned and ran on CPU); a name it knows that is not
    installed is skipped with a warning, as before. get_all_providers lists onnxruntime's
    names (this project's family among them)."""
    import onnxruntime

    assert set(onnxruntime.get_all_providers()) <= set(ort.get_all_providers())
    assert ort.get_all_providers()[-1] == CPU
    sess = ort.InferenceSession(chain_model(), providers=[CPU])
    with pytest.raises(RuntimeError, match="Unknown Provider Type: FooExecutionProvider"):
        sess.set_providers(["FooExecutionProvider"])
    assert sess.get_providers() == [CPU]  # the session is as it was
    np.testing.assert_allclose(sess.run(None, {"x": np.ones((1, 4), np.float32)})[0],
                               chain_expected(np.ones((1, 4), np.float32)))
    so = ort.SessionOptions()
    with pytest.raises(RuntimeError, match="Unknown Provider Type: FooExecutionProvider"):
        so.add_provider("FooExecutionProvider", {})
    so.add_provider("DmlExecutionProvider", {})  # known to onnxruntime, not installed: skipped
    with pytest.warns(UserWarning, match="DmlExecutionProvider"):
        assert ort.InferenceSession(chain_model(), so).get_providers() == [CPU]
