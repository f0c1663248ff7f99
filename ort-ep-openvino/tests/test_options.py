"""Provider options: onnxruntime's names, parsed values, clear errors naming the valid ones."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ort_core as ort
from conftest import OV, assert_parity, ov_state, reference, session
from ort_core.testing import models
from ort_ep_openvino.options import parse_device_type


def compiled_property(sess, name):
    (kernel,) = ov_state(sess)["kernels"]
    return kernel._single.compiled.get_property(name)


@pytest.fixture(scope="module")
def mlp():
    return models.mlp(in_features=32, hidden=64, layers=2)


def test_unknown_key_names_the_valid_keys(mlp):
    with pytest.raises(ort.InvalidArgument, match="unknown provider option 'devices'.*device_type.*num_of_threads"):
        session(mlp, {"devices": "CPU"})


@pytest.mark.parametrize(
    "key,value,match",
    [
        ("device_type", "TPU", "valid forms: CPU, GPU"),
        ("device_type", "HETERO:", "valid forms"),
        ("precision", "INT4", "valid values: FP32, FP16, ACCURACY"),
        ("performance_hint", "FAST", "LATENCY, THROUGHPUT, CUMULATIVE_THROUGHPUT"),
        ("num_of_threads", "-1", "num_of_threads must be a whole number >= 0"),
        ("num_streams", "many", "num_streams must be a whole number"),
        ("shape_cache_size", "0", ">= 1"),
        ("min_subgraph_size", "0", ">= 1"),
        ("disable_dynamic_shapes", "maybe", "valid values: True, False"),
        ("load_config", "{not json", "not valid JSON"),
        ("load_config", '{"CPU": 4}', "must map a device to its properties"),
        ("load_config", '{"TPU": {}}', "valid devices: CPU, GPU, NPU"),
    ],
)
def test_bad_values_name_the_valid_ones(mlp, key, value, match):
    with pytest.raises(ort.InvalidArgument, match=match):
        session(mlp, {key: value})


def test_device_type_forms():
    assert parse_device_type("cpu") == "CPU"
    assert parse_device_type("gpu.1") == "GPU.1"
    assert parse_device_type("hetero:gpu, cpu") == "HETERO:GPU,CPU"
    assert parse_device_type("AUTO") == "AUTO"
    assert parse_device_type("MULTI:CPU,GPU.0") == "MULTI:CPU,GPU.0"


def test_absent_device_is_an_error_at_session_creation(mlp):
    import openvino as ov

    if "NPU" in ov.Core().available_devices:
        pytest.skip("this machine has an NPU")
    with pytest.raises(ort.EPFail, match="OpenVINO device NPU is not present here; available devices: CPU"):
        session(mlp, {"device_type": "NPU"})
    with pytest.raises(ort.EPFail, match="NPU is not present"):
        session(mlp, {"device_type": "HETERO:NPU,CPU"})


@pytest.mark.parametrize("device", ["AUTO", "AUTO:CPU", "HETERO:CPU", "MULTI:CPU"])
def test_meta_devices_run(mlp, device):
    feeds = models.random_inputs(mlp, batch=2)
    sess = session(mlp, {"device_type": device})
    assert sess.get_placement().counts() == {OV: len(sess.get_placement().nodes)}
    assert_parity(sess.run(None, feeds), reference(mlp.SerializeToString(), feeds))


@pytest.mark.parametrize("device", ["CPU", "AUTO", "AUTO:CPU", "HETERO:CPU", "MULTI:CPU"])
def test_stated_precision_is_what_openvino_reports(mlp, device):
    """The note says FP32: OpenVINO must report f32 for every device it compiled for. Read from
    the compiled model, so the verdict is the same on CPUs with and without bf16 (where the CPU
    plugin left without a hint would choose bf16); the config is checked too, since a CPU
    without bf16 reports f32 whatever was asked."""
    from ort_ep_openvino.kernel import reported_precisions

    sess = session(mlp, {"device_type": device})
    (kernel,) = ov_state(sess)["kernels"]
    assert reported_precisions(kernel._single.compiled) == {"CPU": "f32"}
    config = ov_state(sess)["settings"].config
    cpu = config["DEVICE_PROPERTIES"]["CPU"] if "DEVICE_PROPERTIES" in config else config
    assert cpu["INFERENCE_PRECISION_HINT"] == "f32"
    assert {p.note for p in sess.get_placement().nodes} == {f"OpenVINO {device} FP32"}


def test_a_precision_openvino_does_not_report_fails_the_group(mlp, monkeypatch):
    """If OpenVINO compiled in another precision than the stated one, the group is not run
    by OpenVINO (the CPU provider takes its nodes, with the reason)."""
    from ort_ep_openvino import kernel

    monkeypatch.setattr(kernel, "reported_precisions", lambda compiled: {"CPU": "bf16"})
    sess = session(mlp, {"device_type": "AUTO"})
    placement = sess.get_placement()
    assert placement.counts() == {"CPUExecutionProvider": len(placement.nodes)}
    assert "FP32 was asked, but OpenVINO compiled" in str(placement)
    assert "CPU in bf16" in str(placement)


def test_precision_default_is_fp32_on_cpu(mlp):
    sess = session(mlp)
    assert ov_state(sess)["settings"].precision == "FP32"
    assert str(compiled_property(sess, "INFERENCE_PRECISION_HINT")) == "<Type: 'float32'>"


def test_precision_fp16_and_accuracy(mlp):
    feeds = models.random_inputs(mlp, batch=2)
    expected = reference(mlp.SerializeToString(), feeds)
    fp16 = session(mlp, {"precision": "fp16"})
    assert ov_state(fp16)["settings"].config["INFERENCE_PRECISION_HINT"] == "f16"
    # the CPU plugin's half precision: f16 where the CPU computes it natively, else bf16 where
    # it has AVX512-BF16 or AMX, else f32; the note says which when it is not f16
    (kernel,) = ov_state(fp16)["kernels"]
    ran = kernel.precisions["CPU"]
    assert ran in ("f16", "bf16", "f32")
    notes = {p.note for p in fp16.get_placement().nodes}
    assert notes == {"OpenVINO CPU FP16" if ran == "f16" else f"OpenVINO CPU FP16 (OpenVINO runs CPU in {ran})"}
    assert_parity(fp16.run(None, feeds), expected, rel=1e-2)  # half precision: looser on purpose
    accuracy = session(mlp, {"precision": "ACCURACY"})
    assert str(compiled_property(accuracy, "EXECUTION_MODE_HINT")) == "ExecutionMode.ACCURACY"
    assert_parity(accuracy.run(None, feeds), expected)


def test_threads_streams_hint(mlp):
    sess = session(mlp, {"num_of_threads": "2", "num_streams": "2", "performance_hint": "throughput"})
    assert int(compiled_property(sess, "INFERENCE_NUM_THREADS")) == 2
    assert int(compiled_property(sess, "NUM_STREAMS")) == 2
    assert "THROUGHPUT" in str(compiled_property(sess, "PERFORMANCE_HINT"))
    assert sess.get_provider_options()[OV]["num_of_threads"] == "2"


def test_intra_op_threads_used_when_num_of_threads_unset(mlp):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = session(mlp, sess_options=so)
    assert int(compiled_property(sess, "INFERENCE_NUM_THREADS")) == 1


def test_load_config_json_text_and_file(mlp, tmp_path):
    config = {"CPU": {"INFERENCE_NUM_THREADS": "1", "PERFORMANCE_HINT": "THROUGHPUT"}}
    sess = session(mlp, {"load_config": json.dumps(config), "num_of_threads": "2"})
    assert int(compiled_property(sess, "INFERENCE_NUM_THREADS")) == 1  # load_config wins
    path = tmp_path / "ov.json"
    path.write_text(json.dumps(config))
    sess = session(mlp, {"load_config": str(path)})
    assert "THROUGHPUT" in str(compiled_property(sess, "PERFORMANCE_HINT"))


def test_load_config_unknown_property_names_valid_ones(mlp):
    with pytest.raises(ort.EPFail, match="no writable property 'NOT_A_PROPERTY'; valid: .*INFERENCE_NUM_THREADS"):
        session(mlp, {"load_config": {"CPU": {"NOT_A_PROPERTY": "1"}}})


def test_cache_dir_is_filled_and_reused(mlp, tmp_path):
    cache = tmp_path / "ov-cache"
    feeds = models.random_inputs(mlp, batch=2)
    first = session(mlp, {"cache_dir": str(cache)})
    files = sorted(p.name for p in cache.iterdir())
    assert files, "OpenVINO wrote nothing to cache_dir"
    second = session(mlp, {"cache_dir": str(cache)})
    assert sorted(p.name for p in cache.iterdir()) == files  # same model: served from the cache
    np.testing.assert_array_equal(first.run(None, feeds)[0], second.run(None, feeds)[0])
