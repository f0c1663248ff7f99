"""onnxruntime 1.32's remaining Python API, each name checked on onnxruntime and on ort_core.

``ort`` is onnxruntime or ort_core (see ``test_ort_api.py``): each check passes on both, so
each name does what it does in onnxruntime. Names ort_core cannot give a meaning raise an
ort_core error naming why (checked on ort_core only). The last test lists onnxruntime's
public names and asserts ort_core has each one, with an allow-list of what cannot apply.
"""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import make_model, tensor_info

CPU = "CPUExecutionProvider"
X = np.array([[1.0, -2.0, 0.5], [-1.0, 2.0, -0.5]], np.float32)




@pytest.fixture
def core(ort_nodes):
    import ort_core

    return ort_core


def two_outputs() -> bytes:
    """y = Relu(x), z = Neg(x); x is [N, 3] with N denoted DATA_BATCH."""
    x = tensor_info("x", ["N", 3])
    x.type.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["z"])]
    return make_model(nodes, [x], [tensor_info("y", None), tensor_info("z", None)]).SerializeToString()


def add_w(external: bool = False) -> onnx.ModelProto:
    """y = x + w, w = [1, 1, 1] (its data in "w.bin" when ``external``)."""
    w = numpy_helper.from_array(np.ones(3, np.float32), "w")
    if external:
        w.ClearField("raw_data")
        w.data_location = TensorProto.EXTERNAL
        for k, v in (("location", "w.bin"), ("offset", "0"), ("length", "12")):
            w.external_data.add(key=k, value=v)
    return make_model([helper.make_node("Add", ["x", "w"], ["y"])], [tensor_info("x", [3])],
                      [tensor_info("y", [3])], [w])


def session(ort, model, so=None):
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return ort.InferenceSession(data, so, providers=[CPU])


# ------------------------------------------------------------------ InferenceSession
def test_run_async_calls_back_on_another_thread(ort):
    sess = session(ort, two_outputs())
    done, got = threading.Event(), {}

    def callback(results, user_data, err):
        got.update(results=results, user_data=user_data, err=err, thread=threading.current_thread())
        done.set()

    sess.run_async(None, {"x": X}, callback, "mine")
    assert done.wait(10)
    assert got["err"] == "" and got["user_data"] == "mine" and got["thread"] is not threading.main_thread()
    np.testing.assert_array_equal(got["results"][0], np.maximum(X, 0))
    np.testing.assert_array_equal(got["results"][1], -X)
    done.clear()
    sess.run_async(None, {"x": X.astype(np.float64)}, callback, 7)  # a run error goes to the callback
    assert done.wait(10)
    assert got["results"] == [] and got["user_data"] == 7 and ("double" in got["err"] or "float64" in got["err"])
    with pytest.raises(ValueError):  # a missing input is refused before the thread starts
        sess.run_async(None, {"q": X}, callback, None)


def test_input_and_output_memory_infos_name_the_cpu(ort):
    sess = session(ort, two_outputs())
    inputs, outputs = sess.get_input_memory_infos(), sess.get_output_memory_infos()
    assert len(inputs) == 1 and len(outputs) == 2
    for info in [*inputs, *outputs]:
        assert isinstance(info, ort.OrtMemoryInfo)
        assert (info.name, info.device_id, info.mem_type) == ("Cpu", 0, ort.OrtMemType.DEFAULT)
        assert info.allocator_type == ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR
        assert info.device_vendor_id == 0
    (device,) = sess.get_input_epdevices()
    assert device.ep_name == CPU and device.device.type == ort.OrtHardwareDeviceType.CPU


def test_memory_infos_follow_the_consuming_provider(core):
    """A provider with device memory: its inputs' memory info names that memory."""
    from fake_providers import FakeDeviceProvider

    assert core.register(FakeDeviceProvider(ops={"Relu", "Neg"}), "fake-device")
    sess = core.InferenceSession(two_outputs(), providers=["FakeDeviceExecutionProvider", CPU])
    (info,) = sess.get_input_memory_infos()
    assert info.name == "Fake" and info.device_type == core.OrtMemoryInfoDeviceType.GPU
    assert [i.name for i in sess.get_output_memory_infos()] == ["Fake", "Fake"]
    assert sess.get_input_epdevices()[0].ep_name == "FakeDeviceExecutionProvider"


def test_run_with_ortvaluevector(ort):
    sess = session(ort, two_outputs())
    feeds = [ort.OrtValue.ortvalue_from_numpy(X)]
    fetches = ort.capi._pybind_state.OrtValueVector() if ort.__name__ == "onnxruntime" else ort.OrtValueVector()
    device = ort.OrtDevice.make("cpu", 0)
    if ort.__name__ == "onnxruntime":  # its binding takes the C++ vectors
        c_feeds = ort.capi._pybind_state.OrtValueVector()
        c_feeds.push_back(feeds[0]._ortvalue)
        sess.run_with_ortvaluevector(ort.RunOptions(), ["x"], c_feeds, ["z"], fetches, [device._get_c_device()])
        value = fetches[0].numpy()
    else:
        sess.run_with_ortvaluevector(ort.RunOptions(), ["x"], feeds, ["z"], fetches, [device])
        value = fetches[0].numpy()
    assert len(fetches) == 1
    np.testing.assert_array_equal(value, -X)


def test_create_ortvalue_from_shape_and_type(ort):
    sess = session(ort, two_outputs())
    value = sess.create_ortvalue_from_shape_and_type([2, 3], np.float32, "cpu", 0)
    assert value.shape() == [2, 3] and value.data_type() == "tensor(float)" and value.device_name() == "cpu"
    value = sess.create_ortvalue_from_shape_and_type([4], TensorProto.INT64, "cpu")
    assert value.data_type() == "tensor(int64)"


def test_dynamic_options_tuning_and_captured_graph(ort):
    sess = session(ort, two_outputs())
    sess.set_ep_dynamic_options({"ep.dynamic.workload_type": "Efficient"})
    assert sess.get_tuning_results() == []
    sess.set_tuning_results([])
    assert sess.release_captured_graph() is None
    np.testing.assert_array_equal(sess.run(["y"], {"x": X})[0], np.maximum(X, 0))


def test_dynamic_options_reach_the_providers(core):
    sess = session(core, two_outputs())
    sess.set_ep_dynamic_options({"ep.dynamic.x": "1"})
    assert all(bp.ctx.session_config["ep.dynamic.x"] == "1" for bp in sess._providers)
    with pytest.raises(core.InvalidArgument):
        sess.set_ep_dynamic_options({"k": 1})


# ------------------------------------------------------------------ SessionOptions
def test_session_options_defaults(ort):
    so = ort.SessionOptions()
    assert so.use_deterministic_compute is False and so.enable_mem_reuse is True
    assert so.use_per_session_threads is True and so.execution_order == ort.ExecutionOrder.DEFAULT
    assert {k: int(v) for k, v in ort.ExecutionOrder.__members__.items()} == {
        "DEFAULT": 0, "PRIORITY_BASED": 1, "MEMORY_EFFICIENT": 2}
    so.use_deterministic_compute = True
    so.execution_order = ort.ExecutionOrder.PRIORITY_BASED
    np.testing.assert_array_equal(session(ort, two_outputs(), so).run(["y"], {"x": X})[0], np.maximum(X, 0))


def test_add_initializer_overrides_it(ort):
    w = np.array([10, 20, 30], np.float32)
    so = ort.SessionOptions()
    value = ort.OrtValue.ortvalue_from_numpy(w)  # kept alive: onnxruntime does not own it
    so.add_initializer("w", value)
    so.add_initializer("not_in_model", value)  # ignored
    out = session(ort, add_w(), so).run(None, {"x": np.zeros(3, np.float32)})[0]
    np.testing.assert_array_equal(out, w)
    with pytest.raises(Exception, match="(?i)ortvalue"):  # a numpy array is not an OrtValue
        so.add_initializer("w", w)


def test_add_external_initializers(ort):
    w = np.array([1, 2, 3], np.float32)
    value = ort.OrtValue.ortvalue_from_numpy(w)
    so = ort.SessionOptions()
    so.add_external_initializers(["w"], [value])
    out = session(ort, add_w(external=True), so).run(None, {"x": np.zeros(3, np.float32)})[0]
    np.testing.assert_array_equal(out, w)
    so = ort.SessionOptions()
    so.add_external_initializers(["w"], [value])
    with pytest.raises(Exception, match="non-external|not in external"):  # its data is in the model
        session(ort, add_w(external=False), so)


def test_add_external_initializers_from_files_in_memory(ort):
    blob = np.array([4, 5, 6], np.float32).tobytes()
    so = ort.SessionOptions()
    so.add_external_initializers_from_files_in_memory(["w.bin"], [blob], [len(blob)])
    out = session(ort, add_w(external=True), so).run(None, {"x": np.zeros(3, np.float32)})[0]
    np.testing.assert_array_equal(out, [4, 5, 6])


def test_free_dimension_override_by_denotation(ort):
    so = ort.SessionOptions()
    so.add_free_dimension_override_by_denotation("DATA_BATCH", 2)
    sess = session(ort, two_outputs(), so)
    assert sess.get_inputs()[0].shape == [2, 3]
    with pytest.raises(Exception, match="dimension|Expected: 2"):
        sess.run(None, {"x": np.zeros((4, 3), np.float32)})


def test_load_cancellation_flag(ort):
    so = ort.SessionOptions()
    so.set_load_cancellation_flag(True)
    with pytest.raises(Exception, match="(?i)cancel"):
        session(ort, two_outputs(), so)
    so.set_load_cancellation_flag(False)
    session(ort, two_outputs(), so)


def test_register_custom_ops_library_is_refused_naming_why(core):
    with pytest.raises(core.NotImplemented, match="custom-op libraries.*provider plugin"):
        core.SessionOptions().register_custom_ops_library("/tmp/libcustom.so")


def test_ep_context_data_read_func(core, tmp_path):
    """An EPContext model whose blob file is read through the callback, not from disk."""
    import onnx as onnx_
    from context_provider import ContextCompilerProvider

    from conftest import chain_model

    name = "ContextCompilerExecutionProvider"
    provider = ContextCompilerProvider()
    assert core.register(provider, "context-compiler")
    path = tmp_path / "chain.onnx"
    onnx_.save(chain_model(), path)
    out = tmp_path / "cache.onnx"
    so = core.SessionOptions()
    for k, v in {"ep.context_enable": "1", "ep.context_embed_mode": "0", "ep.context_file_path": str(out)}.items():
        so.add_session_config_entry(k, v)
    core.InferenceSession(str(path), so, providers=[name])
    side = tmp_path / f"cache_{name}_0.bin"
    blob = side.read_bytes()
    side.unlink()  # the callback is the only way to the data now
    asked = []

    def read(file_name, buffer):
        asked.append(file_name)
        buffer.allocate(len(blob))
        buffer.write(blob)

    so = core.SessionOptions()
    so.set_ep_context_data_read_func(read, 1 << 20)
    core.InferenceSession(str(out), so, providers=[name])
    assert asked == [side.name] and provider.loads == 1
    so.clear_ep_context_data_read_func()
    with pytest.raises(core.InvalidGraph, match="not found"):
        core.InferenceSession(str(out), so, providers=[name])


def test_global_thread_pool_reaches_providers_without_per_session_threads(core):
    core.set_global_thread_pool_sizes(3, 1)
    try:
        so = core.SessionOptions()
        so.use_per_session_threads = False
        sess = session(core, two_outputs(), so)
        assert {bp.ctx.intra_op_num_threads for bp in sess._providers} == {3}
        assert {bp.ctx.intra_op_num_threads for bp in session(core, two_outputs())._providers} == {0}
    finally:
        core.set_global_thread_pool_sizes(0, 0)


# ------------------------------------------------------------------ RunOptions
def failing_branch_model() -> bytes:
    """y = Relu(x); z = Reshape(x, [7]), which fails for a [2, 3] x."""
    shape = numpy_helper.from_array(np.array([7], np.int64), "s")
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Reshape", ["x", "s"], ["z"])]
    return make_model(nodes, [tensor_info("x", [2, 3])], [tensor_info("y", None), tensor_info("z", None)],
                      [shape]).SerializeToString()


def test_only_execute_path_to_fetches_prunes(ort):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = session(ort, failing_branch_model(), so)
    ro = ort.RunOptions()
    assert ro.only_execute_path_to_fetches is False
    with pytest.raises(Exception, match="(?i)reshape"):
        sess.run(["y"], {"x": X}, ro)  # every node runs: the Reshape fails
    ro.only_execute_path_to_fetches = True
    if ort.__name__ == "onnxruntime":
        # documented as "only execute the nodes needed by fetch list", but honoured only by
        # onnxruntime's training builds (microsoft/onnxruntime#16013): its inference build
        # still runs the Reshape; ort_core prunes as documented
        with pytest.raises(Exception, match="(?i)reshape"):
            sess.run(["y"], {"x": X}, ro)
        return
    np.testing.assert_array_equal(sess.run(["y"], {"x": X}, ro)[0], np.maximum(X, 0))
    with pytest.raises(Exception, match="(?i)reshape"):  # asking for z runs its node
        sess.run(["y", "z"], {"x": X}, ro)


def lora_model() -> bytes:
    """y = x @ w + (x @ lora_a) @ lora_b, the LoRA weights inputs whose initializers (rank 0)
    are the defaults: what an adapter's parameters are fed to."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("MatMul", ["x", "lora_a"], ["xa"]),
             helper.make_node("MatMul", ["xa", "lora_b"], ["xab"]), helper.make_node("Add", ["xw", "xab"], ["y"])]
    inits = [numpy_helper.from_array(np.eye(3, dtype=np.float32), "w"),
             numpy_helper.from_array(np.zeros((3, 0), np.float32), "lora_a"),
             numpy_helper.from_array(np.zeros((0, 3), np.float32), "lora_b")]
    inputs = [tensor_info("x", ["N", 3]), tensor_info("lora_a", [3, "r"]), tensor_info("lora_b", ["r", 3])]
    return make_model(nodes, inputs, [tensor_info("y", None)], inits).SerializeToString()


LORA_A = np.arange(6, dtype=np.float32).reshape(3, 2) / 4
LORA_B = np.array([[1.0, -1.0, 2.0], [0.5, 0.0, -3.0]], np.float32)


def test_lora_adapters_feed_their_parameters_by_name(ort, tmp_path):
    fmt = ort.AdapterFormat()
    assert (fmt.get_format_version(), fmt.get_adapter_version(), fmt.get_parameters()) == (1, 0, {})
    fmt.set_adapter_version(3)
    fmt.set_model_version(7)
    fmt.set_parameters({"lora_a": ort.OrtValue.ortvalue_from_numpy(LORA_A),
                        "lora_b": ort.OrtValue.ortvalue_from_numpy(LORA_B)})
    path = str(tmp_path / "a.onnx_adapter")
    fmt.export_adapter(path)
    back = ort.AdapterFormat.read_adapter(path)
    assert (back.get_format_version(), back.get_adapter_version(), back.get_model_version()) == (1, 3, 7)
    params = back.get_parameters()
    np.testing.assert_array_equal(params["lora_a"].numpy(), LORA_A)
    np.testing.assert_array_equal(params["lora_b"].numpy(), LORA_B)

    sess = session(ort, lora_model())
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], X)  # the defaults: no adaptation
    adapter = ort.LoraAdapter()
    adapter.Load(path)
    ro = ort.RunOptions()
    ro.add_active_adapter(adapter)
    want = X + X @ LORA_A @ LORA_B
    np.testing.assert_allclose(sess.run(None, {"x": X}, ro)[0], want, rtol=1e-6)
    # the adapter's value over a feed of the same name, as onnxruntime's
    np.testing.assert_allclose(sess.run(None, {"x": X, "lora_a": np.zeros((3, 2), np.float32)}, ro)[0], want,
                               rtol=1e-6)
    other = ort.AdapterFormat()
    other.set_parameters({"nope": ort.OrtValue.ortvalue_from_numpy(LORA_A)})
    other.export_adapter(str(tmp_path / "b.onnx_adapter"))
    stray = ort.LoraAdapter()
    stray.Load(str(tmp_path / "b.onnx_adapter"))
    ro = ort.RunOptions()
    ro.add_active_adapter(stray)
    with pytest.raises(Exception, match="Invalid input name: nope"):
        sess.run(None, {"x": X}, ro)
    (tmp_path / "bad.onnx_adapter").write_bytes(b"garbage" * 10)
    with pytest.raises(Exception, match="(?i)not .*valid lora"):
        ort.LoraAdapter().Load(str(tmp_path / "bad.onnx_adapter"))


def test_lora_adapter_files_interchange_with_onnxruntime(core, tmp_path):
    """Files written by either load in the other, with the same versions and parameters (of
    several element types and ranks, an empty one included)."""
    import ml_dtypes
    import onnxruntime

    arrays = {"f": LORA_A, "h": LORA_B.astype(np.float16), "i": np.array([[-3, 4]], np.int64),
              "u": np.arange(5, dtype=np.uint8), "e": np.zeros((2, 0), np.float32), "d": np.array([2.5], np.float64),
              "b": np.array([1.5, -2.0], ml_dtypes.bfloat16)}
    for writer, reader in ((onnxruntime, core), (core, onnxruntime)):
        fmt = writer.AdapterFormat()
        fmt.set_adapter_version(11)
        fmt.set_model_version(2)
        fmt.set_parameters({k: writer.OrtValue.ortvalue_from_numpy(v) for k, v in arrays.items()
                            if writer is core or k != "b"})  # (onnxruntime's OrtValue has no bfloat16)
        path = str(tmp_path / f"{writer.__name__}.onnx_adapter")
        fmt.export_adapter(path)
        back = reader.AdapterFormat.read_adapter(path)
        assert (back.get_format_version(), back.get_adapter_version(), back.get_model_version()) == (1, 11, 2)
        params = back.get_parameters()
        assert set(params) == set(arrays) - ({"b"} if writer is onnxruntime else set())
        for name, value in params.items():
            if name == "b" and reader is onnxruntime:  # (no numpy for its bfloat16 OrtValue)
                assert value.data_type() == "tensor(bfloat16)" and value.shape() == [2]
                continue
            got = value.numpy()
            assert got.dtype == arrays[name].dtype and got.shape == arrays[name].shape, name
            assert got.tobytes() == arrays[name].tobytes(), name


def test_lora_adapters_apply_to_bound_runs_too(core, tmp_path):
    """``run_with_iobinding`` with the options feeds the adapter as ``run`` does (onnxruntime
    1.32 ignores active adapters in a bound run: its output there is the unadapted model's)."""
    fmt = core.AdapterFormat()
    fmt.set_parameters({"lora_a": LORA_A, "lora_b": LORA_B})
    fmt.export_adapter(str(tmp_path / "a.onnx_adapter"))
    adapter = core.LoraAdapter()
    adapter.Load(str(tmp_path / "a.onnx_adapter"))
    ro = core.RunOptions()
    ro.add_active_adapter(adapter)
    sess = session(core, lora_model())
    binding = sess.io_binding()
    binding.bind_cpu_input("x", X)
    binding.bind_output("y")
    sess.run_with_iobinding(binding, ro)
    np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], X + X @ LORA_A @ LORA_B, rtol=1e-6)


def test_lora_adapters_refuse_what_they_cannot_use(core, tmp_path):
    with pytest.raises(core.InvalidArgument, match="needs an ort_core.LoraAdapter"):
        core.RunOptions().add_active_adapter(object())
    with pytest.raises(core.InvalidArgument, match="no adapter loaded"):
        core.RunOptions().add_active_adapter(core.LoraAdapter())
    with pytest.raises(core.NoSuchFile, match="not found"):
        core.LoraAdapter().Load(str(tmp_path / "missing.onnx_adapter"))
    fmt = core.AdapterFormat()
    with pytest.raises(core.InvalidArgument, match="strings"):
        fmt.set_parameters({"t": np.array(["a"])})
    with pytest.raises(core.InvalidArgument, match="scalar"):  # onnxruntime writes it, then cannot read it
        fmt.set_parameters({"s": np.array(2.5, np.float32)})
    fmt.set_parameters({"a": LORA_A})
    fmt.export_adapter(str(tmp_path / "a.onnx_adapter"))
    data = (tmp_path / "a.onnx_adapter").read_bytes()
    (tmp_path / "cut.onnx_adapter").write_bytes(data[: len(data) // 2])
    with pytest.raises(core.InvalidGraph, match="not a valid LoRA adapter file"):
        core.LoraAdapter().Load(str(tmp_path / "cut.onnx_adapter"))


# ------------------------------------------------------------------ IOBinding and OrtValue
def test_get_outputs_as_ortvaluevector(ort):
    sess = session(ort, two_outputs())
    binding = sess.io_binding()
    binding.bind_cpu_input("x", X)
    binding.bind_output("z")
    sess.run_with_iobinding(binding)
    outputs = binding.get_outputs_as_ortvaluevector()
    assert len(outputs) == 1 and hasattr(outputs, "push_back")
    np.testing.assert_array_equal(outputs[0].numpy(), -X)


def test_update_inplace(ort):
    array = np.zeros((2, 3), np.float32)
    value = ort.OrtValue.ortvalue_from_numpy(array)
    value.update_inplace(np.full((2, 3), 5, np.float32))
    np.testing.assert_array_equal(value.numpy(), 5)
    with pytest.raises(Exception, match="(?i)size|match"):
        value.update_inplace(np.zeros((3, 3), np.float32))


def test_ortvalue_from_numpy_with_onnx_type(ort):
    bits = np.array([0x3F80, 0x4000], np.uint16)  # 1.0 and 2.0 in bfloat16
    value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16)
    assert value.data_type() == "tensor(bfloat16)" and value.shape() == [2]
    with pytest.raises(Exception, match="(?i)size|bytes"):
        ort.OrtValue.ortvalue_from_numpy_with_onnx_type(np.array([1, 2], np.uint8), TensorProto.BFLOAT16)


def test_value_kinds(ort):
    value = ort.OrtValue.ortvalue_from_numpy(X)
    assert value.is_tensor() and not value.is_tensor_sequence() and not value.is_sparse_tensor()


def test_sparse_tensors_are_refused_naming_why(core):
    with pytest.raises(core.NotImplemented, match="sparse"):
        core.SparseTensor.sparse_coo_from_numpy([3], np.zeros(1, np.float32), np.zeros(1, np.int64), "cpu", 0)


# ------------------------------------------------------------------ module level
def test_device_and_memory_info_types(ort):
    device = ort.OrtDevice.make("cpu", 0)
    assert (device.device_type(), device.device_id(), device.device_mem_type(), device.device_vendor_id()) == (0, 0, 0, 0)
    info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_DEVICE_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    assert (info.name, info.allocator_type, info.device_id, info.mem_type) == (
        "Cpu", ort.OrtAllocatorType.ORT_DEVICE_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    info = ort.OrtMemoryInfo.create_v2("Cuda", ort.OrtMemoryInfoDeviceType.GPU, ort.OrtDeviceVendorId.NVIDIA, 0,
                                       ort.OrtDeviceMemoryType.DEFAULT, 0, ort.OrtAllocatorType.ORT_DEVICE_ALLOCATOR)
    assert info.device_vendor_id == 0x10DE and info.name == "Cuda"
    expected = {
        "OrtMemType": {"CPU_INPUT": -2, "CPU_OUTPUT": -1, "CPU": -1, "DEFAULT": 0},
        "OrtAllocatorType": {"INVALID": -1, "ORT_DEVICE_ALLOCATOR": 0, "ORT_ARENA_ALLOCATOR": 1},
        "OrtMemoryInfoDeviceType": {"CPU": 0, "GPU": 1, "FPGA": 2, "NPU": 3},
        "OrtDeviceVendorId": {"NONE": 0, "AMD": 0x1002, "NVIDIA": 0x10DE, "ARM": 0x13B5, "MICROSOFT": 0x1414,
                              "HUAWEI": 0x19E5, "QUALCOMM": 0x5143, "INTEL": 0x8086},
    }
    for name, members in expected.items():
        assert {k: int(v) for k, v in getattr(ort, name).__members__.items()} == members, name
    ort.OrtArenaCfg({"max_mem": 1 << 20})
    ort.OrtArenaCfg(0, -1, -1, -1)


def test_module_functions(ort):
    ort.set_default_logger_verbosity(1)
    ort.set_default_logger_verbosity(0)
    # (set_global_thread_pool_sizes is not called on onnxruntime here: once its global pool
    # exists, every later session with use_per_session_threads=True fails in this process)
    assert ort.get_version_string() == ort.__version__
    assert isinstance(ort.get_build_info(), str)


def test_default_logger_callback(core):
    got = []
    core.set_default_logger_callback(lambda *args: got.append(args), 1)
    try:
        import logging

        logging.getLogger("ort_core").info("hello %s", "there")
    finally:
        core.set_default_logger_callback(None)
        core.set_default_logger_severity(2)
    ((severity, category, logid, location, message),) = got
    assert (severity, category, message) == (1, "ort_core", "hello there") and "test_ort_api_gaps" in location
    logging.getLogger("ort_core").warning("after reset")
    assert len(got) == 1
    with pytest.raises(core.InvalidArgument):
        core.set_default_logger_callback(print, 9)


def test_add_initializer_of_another_shape_is_an_error(core):
    so = core.SessionOptions()
    so.add_initializer("w", core.OrtValue.ortvalue_from_numpy(np.zeros(4, np.float32)))
    with pytest.raises(core.InvalidArgument, match="add_initializer 'w'.*FLOAT \\[3\\].*float32 \\[4\\]"):
        session(core, add_w(), so)


def test_copy_tensors_host(core):
    # onnxruntime 1.32 has no host-to-host transfer ("Data transfer implementation ... was not
    # found"); ort-core copies through the providers' transfers, host to host too
    src, dst = core.OrtValue.ortvalue_from_numpy(X), core.OrtValue.ortvalue_from_numpy(np.zeros_like(X))
    core.copy_tensors([src], [dst])
    np.testing.assert_array_equal(dst.numpy(), X)
    with pytest.raises(core.InvalidArgument):
        core.copy_tensors([src], [core.OrtValue.ortvalue_from_numpy(np.zeros(2, np.float32))])


def test_a_cpu_device_has_no_sync_stream(core):
    # onnxruntime 1.32: RuntimeError "ep_device does not use DEFAULT memory of a non-CPU device."
    cpu = next(d for d in core.get_ep_devices() if d.ep_name == CPU)
    with pytest.raises(RuntimeError, match="DEFAULT memory of a non-CPU device"):
        cpu.create_sync_stream()


def test_a_device_sync_stream_orders_copies(fake):
    """A device-memory provider's device gives an ``OrtSyncStream`` (handle 0: its providers
    copy synchronously), which ``copy_tensors`` takes; anything else as a stream is refused."""
    import ort_core

    device = next(d for d in ort_core.get_ep_devices() if d.ep_device.memory != ort_core.types.HOST_MEMORY)
    stream = device.create_sync_stream()
    assert isinstance(stream, ort_core.OrtSyncStream) and stream.get_handle() == 0
    src, dst = ort_core.OrtValue.ortvalue_from_numpy(X), ort_core.OrtValue.ortvalue_from_numpy(np.zeros_like(X))
    ort_core.copy_tensors([src], [dst], stream)
    np.testing.assert_array_equal(dst.numpy(), X)
    with pytest.raises(ort_core.InvalidArgument, match="stream must be an OrtSyncStream"):
        ort_core.copy_tensors([src], [dst], "stream")


def test_register_execution_provider_library(core, tmp_path, capsys):
    plugin = tmp_path / "acme_ep.py"
    plugin.write_text(
        "import ort_core\nfrom ort_core import ProviderSpec, EpDevices, EpDevice\n"
        "@ort_core.hookimpl\ndef ort_register_providers():\n"
        "    return [ProviderSpec('AcmeExecutionProvider', '1.0', 'Acme', 'kernel')]\n"
        "@ort_core.hookimpl\ndef ort_ep_devices(provider):\n"
        "    if provider == 'AcmeExecutionProvider':\n"
        "        return EpDevices((EpDevice(ep_name=provider, ep_vendor='Acme', name='acme', device_type='CPU'),))\n")
    core.register_execution_provider_library("acme", str(plugin))
    try:
        assert "AcmeExecutionProvider" in core.get_available_providers()
        with pytest.raises(core.InvalidArgument, match="already registered"):
            core.register_execution_provider_library("acme", str(plugin))
        core.print_debug_info()
        assert "AcmeExecutionProvider" in capsys.readouterr().out
    finally:
        core.unregister_execution_provider_library("acme")
    assert "AcmeExecutionProvider" not in core.get_available_providers()
    with pytest.raises(core.Fail, match="was not registered"):  # onnxruntime's message
        core.unregister_execution_provider_library("acme")
    with pytest.raises(core.NotImplemented, match="native EP libraries"):
        core.register_execution_provider_library("native", "/opt/libacme_ep.so")
    with pytest.raises(core.NoSuchFile):
        core.register_execution_provider_library("gone", str(tmp_path / "gone.py"))


# ------------------------------------------------------------------ every public name
# onnxruntime's public names that cannot apply to ort_core, each with why
NOT_APPLICABLE = {
    # onnxruntime's implementation modules and helpers, not API
    "contextlib", "onnxruntime_validation", "import_capi_exception",
    # onnxruntime 1.32's model-package format (multi-variant packages of EP-compiled models)
    "ModelPackage", "ModelPackageComponentContext", "ModelPackageContext", "ModelPackageOptions",
    "ModelPackageWriteMode",
    # onnxruntime's Python wrapper class of its C++ binding, an internal of IOBinding
    "SessionIOBinding",
}
CLASS_NOT_APPLICABLE: dict[str, set[str]] = {
    # the instance attribute holding onnxruntime's wrapper of the user's function for its C++
    # binding (the function itself is the constructor's argument, as here)
    "ModelCompiler": {"get_initializer_location_func_wrapper"},
}


def _public(obj) -> set[str]:
    return {n for n in dir(obj) if not n.startswith("_")}


def test_ort_core_has_every_public_name_of_onnxruntime(core, tmp_path):
    import onnxruntime

    missing = sorted(_public(onnxruntime) - _public(core) - NOT_APPLICABLE)
    assert not missing, f"onnxruntime names ort_core lacks: {missing}"
    stale = sorted(NOT_APPLICABLE & _public(core))
    assert not stale, f"allow-listed as not applicable, yet ort_core has them: {stale}"
    sess_ort = session(onnxruntime, two_outputs())
    sess_core = session(core, two_outputs())
    pairs = {
        "InferenceSession": (sess_ort, sess_core),
        "SessionOptions": (onnxruntime.SessionOptions(), core.SessionOptions()),
        "RunOptions": (onnxruntime.RunOptions(), core.RunOptions()),
        "IOBinding": (sess_ort.io_binding(), sess_core.io_binding()),
        "OrtValue": (onnxruntime.OrtValue.ortvalue_from_numpy(X), core.OrtValue.ortvalue_from_numpy(X)),
        "OrtEpDevice": (onnxruntime.get_ep_devices()[0], core.get_ep_devices()[0]),
        "OrtHardwareDevice": (onnxruntime.get_ep_devices()[0].device, core.get_ep_devices()[0].device),
        "ModelCompiler": (onnxruntime.ModelCompiler(onnxruntime.SessionOptions(), two_outputs()),
                          core.ModelCompiler(core.SessionOptions(), two_outputs())),
        "AdapterFormat": (onnxruntime.AdapterFormat(), core.AdapterFormat()),
        "LoraAdapter": (onnxruntime.LoraAdapter(), core.LoraAdapter()),
    }
    for cls, (a, b) in pairs.items():
        lacking = sorted(_public(a) - _public(b) - CLASS_NOT_APPLICABLE.get(cls, set()))
        assert not lacking, f"{cls}: onnxruntime names ort_core lacks: {lacking}"


# ------------------------------------------------------------------ environment allocators


@pytest.mark.parametrize("allocator,arena", [("ORT_ARENA_ALLOCATOR", "1"), ("ORT_DEVICE_ALLOCATOR", "0")])
def test_a_registered_allocator_decides_the_arena_of_sessions_that_share_it(core, monkeypatch, allocator, arena):
    """create_and_register_allocator registers host memory for sessions with
    session.use_env_allocators=1: the CPU provider's arena (process-wide) is then on for an
    arena allocator, off for a device one, whatever enable_cpu_mem_arena says; other sessions
    keep their own setting."""
    from ort_core import devices

    monkeypatch.setattr(devices, "_SHARED_ALLOCATORS", {})
    info = core.OrtMemoryInfo("Cpu", getattr(core.OrtAllocatorType, allocator), 0, core.OrtMemType.DEFAULT)
    assert core.create_and_register_allocator(info, core.OrtArenaCfg(0, -1, -1, -1)) is None
    core.create_and_register_allocator_v2(CPU, info, {}, None)  # again: the registration replaced

    def arena_config(shared: bool, enable_arena: bool) -> str:
        so = core.SessionOptions()
        so.enable_cpu_mem_arena = enable_arena
        if shared:
            so.add_session_config_entry("session.use_env_allocators", "1")
        sess = session(core, two_outputs(), so)
        np.testing.assert_array_equal(sess.run(["y"], {"x": X})[0], np.maximum(X, 0))
        (cpu,) = [bp for bp in sess._providers if bp.ctx.name == CPU]
        return cpu.ctx.session_config["session.enable_cpu_mem_arena"]

    assert arena_config(shared=True, enable_arena=(arena == "0")) == arena
    assert arena_config(shared=False, enable_arena=False) == "0"
    assert arena_config(shared=False, enable_arena=True) == "1"


def test_registering_an_allocator_outside_host_memory_is_refused_as_onnxruntime_does(core):
    gpu = core.OrtMemoryInfo("Cuda", core.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, core.OrtMemType.DEFAULT)
    with pytest.raises(RuntimeError, match="Only CPU devices are supported"):
        core.create_and_register_allocator(gpu, None)
    cpu = core.OrtMemoryInfo("Cpu", core.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, core.OrtMemType.DEFAULT)
    with pytest.raises(RuntimeError, match="WebGpuExecutionProvider is not implemented in CreateAndRegisterAllocatorV2"):
        core.create_and_register_allocator_v2("WebGpuExecutionProvider", cpu, {}, None)


def test_model_metadata_fields_can_be_set_as_onnxruntime_allows(ort):
    sess = session(ort, two_outputs())
    meta = sess.get_modelmeta()
    meta.producer_name = "mine"
    assert meta.producer_name == "mine"
    assert sess.get_modelmeta().producer_name == "mine"  # the session's one object: what was set stays
    assert session(ort, two_outputs()).get_modelmeta().producer_name != "mine"  # another session's is its own
