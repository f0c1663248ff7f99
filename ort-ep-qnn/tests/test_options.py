"""Options: onnxruntime's QNN EP names; bad keys and values name the valid ones."""

from __future__ import annotations

import numpy as np
import pytest

import ort_core as ort
from conftest import QNN, F, needs_qnn, one_node_model, reference, session
from ort_ep_qnn.options import OPTIONS

NAMES = {
    "backend_type", "backend_path", "htp_performance_mode", "htp_graph_finalization_optimization_mode",
    "enable_htp_fp16_precision", "soc_model", "htp_arch", "device_id", "profiling_level", "profiling_file_path",
    "qnn_context_priority", "offload_graph_io_quantization",
}


def test_the_options_are_onnxruntimes_names():
    assert {o.name for o in OPTIONS} == NAMES


def test_unknown_key_names_every_valid_key():
    model, _ = one_node_model("Relu", [("x", (2, 3), F)], [("y", (2, 3), F)])
    with pytest.raises(ort.InvalidArgument) as info:
        session(model, {"htp_precision": "fp16"})
    for name in NAMES:
        assert name in str(info.value)


@pytest.mark.parametrize("key,value,valid", [
    ("htp_performance_mode", "turbo", "burst"),
    ("htp_graph_finalization_optimization_mode", "7", "0, 1, 2, 3"),
    ("enable_htp_fp16_precision", "yes", "0, 1"),
    ("htp_arch", "70", "68"),
    ("qnn_context_priority", "urgent", "normal_high"),
    ("backend_type", "dsp", "htp"),
    ("profiling_level", "verbose", "detailed"),
    ("soc_model", "-1", ">= 0"),
])
def test_bad_value_names_the_key_and_the_valid_values(key, value, valid):
    model, _ = one_node_model("Relu", [("x", (2, 3), F)], [("y", (2, 3), F)])
    with pytest.raises(ort.InvalidArgument) as info:
        session(model, {key: value})
    assert key in str(info.value) and valid in str(info.value)


@needs_qnn
@pytest.mark.parametrize("options,message", [
    ({"backend_path": "/nonexistent/libQnnHtp.so"}, "/nonexistent/libQnnHtp.so"),
])
def test_options_that_cannot_work_here_fail_the_provider(options, message):
    model, _ = one_node_model("Relu", [("x", (2, 3), F)], [("y", (2, 3), F)])
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    with pytest.raises(ort.EPFail, match=message.replace("(", r"\(")):
        ort.InferenceSession(model.SerializeToString(), so, providers=[(QNN, options)])


@needs_qnn
@pytest.mark.parametrize("options", [
    {"htp_graph_finalization_optimization_mode": "3", "qnn_context_priority": "high"},
    {"qnn_context_priority": "low", "htp_performance_mode": "burst", "htp_arch": "68", "soc_model": "30"},
    {"backend_type": "htp", "enable_htp_fp16_precision": "0", "offload_graph_io_quantization": "0"},
])
def test_valid_options_build_and_run(options):
    model, feeds = one_node_model("Conv", [("x", (1, 4, 8, 8), F), ("w", np.ones((4, 4, 3, 3), np.float32) / 9, F)],
                                  [("y", (1, 4, 6, 6), F)])
    sess = session(model, options)
    assert sess.get_placement().counts() == {QNN: 1}
    np.testing.assert_allclose(sess.run(None, feeds)[0], reference(model, feeds)[0], rtol=1e-4, atol=1e-5)


@needs_qnn
def test_device_id_of_a_device_not_here_names_the_devices():
    model, _ = one_node_model("Relu", [("x", (2, 3), F)], [("y", (2, 3), F)])
    with pytest.raises(ort.InvalidArgument, match="device_id 1 not present; devices here: 0"):
        session(model, {"device_id": "1"})


@needs_qnn
def test_backend_path_names_the_library():
    from ort_ep_qnn import _qnn

    path = _qnn.find_library("")
    model, feeds = one_node_model("Relu", [("x", (2, 3), F)], [("y", (2, 3), F)])
    sess = session(model, {"backend_path": path})
    assert sess.get_placement().counts() == {QNN: 1}
    np.testing.assert_array_equal(sess.run(None, feeds)[0], reference(model, feeds)[0])
