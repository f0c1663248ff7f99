"""profiling_level / profiling_file_path: QNN's profile API (QnnProfile_create on the backend,
the handle given to graphFinalize and graphExecute), its events written as onnxruntime's QNN EP
writes them (a CSV), or logged when no file is named."""

from __future__ import annotations

import csv
import gc
import logging

import numpy as np
import pytest
from onnx import helper

import ort_core as ort
from conftest import QNN, F, needs_qnn, onnxruntime_qnn_session, reference, session
from ort_ep_qnn.runtime import LIVE, PROFILE_CSV_HEADER

pytestmark = needs_qnn


def _model():
    """Relu -> Sigmoid: one QNN graph of two nodes."""
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="relu0"), helper.make_node("Sigmoid", ["h"], ["y"], name="sig0")]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", F, (2, 8))],
                              [helper.make_tensor_value_info("y", F, (2, 8))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _rows(path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("level", ["basic", "detailed"])
def test_profiling_writes_finalize_and_execute_events_to_the_csv(tmp_path, level):
    gc.collect()
    before = dict(LIVE)
    path = tmp_path / "qnn_profile.csv"
    model = _model()
    sess = session(model, {"profiling_level": level, "profiling_file_path": str(path)})
    assert sess.get_placement().counts() == {QNN: 2}
    assert LIVE["profile"] == before["profile"] + 1  # one profile handle for the one graph
    finalized = _rows(path)
    assert [r["Message"] for r in finalized if r["Event Level"] == "ROOT"] == ["FINALIZE"]
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)}
    for _ in range(2):
        np.testing.assert_allclose(sess.run(None, feeds)[0], reference(model, feeds)[0], rtol=1e-5, atol=1e-6)

    assert path.read_text().splitlines()[0] == PROFILE_CSV_HEADER  # written once, onnxruntime's columns
    rows = _rows(path)
    assert [r["Message"] for r in rows].count("EXECUTE") == 2  # one per run
    for r in rows:
        # the extended event data's timestamp (0 on the simulator, as onnxruntime writes it)
        assert r["Msg Timestamp"].isdigit() and r["Timing Source"] == "BACKEND"
        assert r["Event Level"] in ("ROOT", "SUB-EVENT") and r["Time"].isdigit()
    execute = [r for r in rows if r["Message"] == "EXECUTE"]
    assert all(r["Unit of Measurement"] == "US" for r in execute)
    nodes = [r for r in rows if r["Message"] == "NODE"]
    if level == "detailed":  # per-node cycles, named after the QNN ops (the ONNX node's name first)
        assert any(r["Event Identifier"].startswith("relu0__") for r in nodes)
        assert any(r["Event Identifier"].startswith("sig0__") for r in nodes)
        assert all(r["Event Level"] == "SUB-EVENT" and r["Unit of Measurement"] == "CYCLES" for r in nodes)
    else:
        assert not nodes
    del sess
    gc.collect()
    assert LIVE == before  # the profile handle is freed with its context


def test_profiling_without_a_file_logs_the_events(caplog):
    so = ort.SessionOptions()
    so.log_severity_level = 1  # info: where the events are logged
    model = _model()
    with caplog.at_level(logging.INFO, logger="ort_core.qnn"):
        sess = session(model, {"profiling_level": "basic"}, sess_options=so)
        sess.run(None, {"x": np.ones((2, 8), np.float32)})
    lines = [r.getMessage() for r in caplog.records if r.name == "ort_core.qnn" and "QNN profile" in r.getMessage()]
    assert any(",FINALIZE," in ln for ln in lines) and any(",EXECUTE," in ln for ln in lines)


def test_a_bad_profiling_level_names_the_valid_ones():
    with pytest.raises(ort.InvalidArgument) as info:
        session(_model(), {"profiling_level": "verbose"})
    assert "profiling_level" in str(info.value) and "off, basic, detailed" in str(info.value)


def test_a_context_model_loaded_with_profiling_reports_its_load_and_runs(tmp_path):
    import onnx

    model = _model()
    onnx.save(model, tmp_path / "two.onnx")
    so = ort.SessionOptions()
    so.add_session_config_entry("ep.context_enable", "1")
    ctx = ort.InferenceSession(str(tmp_path / "two.onnx"), so, providers=[QNN, "CPUExecutionProvider"]) \
        .get_placement().context_model
    path = tmp_path / "load.csv"
    sess = ort.InferenceSession(ctx, providers=[(QNN, {"profiling_level": "basic", "profiling_file_path": str(path)}),
                                                "CPUExecutionProvider"])
    feeds = {"x": np.ones((2, 8), np.float32)}
    np.testing.assert_allclose(sess.run(None, feeds)[0], reference(model, feeds)[0], rtol=1e-5, atol=1e-6)
    messages = [r["Message"] for r in _rows(path)]
    # contextCreateFromBinary's INIT event (loaded, not finalized), then the run
    assert "INIT" in messages and "FINALIZE" not in messages and "EXECUTE" in messages


@pytest.mark.parametrize("level", ["basic", "detailed"])
def test_the_csv_has_the_rows_onnxruntimes_qnn_ep_writes(tmp_path, level):
    # onnxruntime's own QNN EP (the wheel's plugin, the same simulator) on the same model: the
    # same events in the same order, the values aside (times) and the per-node identifiers
    # (QNN op names: onnxruntime names an op after its node, here "<node>__<op><k>")
    def shape(rows):
        return [(r["Msg Timestamp"], r["Message"], r["Unit of Measurement"], r["Timing Source"], r["Event Level"],
                 r["Event Identifier"].split(":")[0].split("__")[0]) for r in rows]

    model = _model()
    feeds = {"x": np.ones((2, 8), np.float32)}
    theirs_path, ours_path = tmp_path / "onnxruntime.csv", tmp_path / "ours.csv"
    theirs = onnxruntime_qnn_session(model, {"profiling_level": level, "profiling_file_path": str(theirs_path)})
    theirs.run(None, feeds)
    del theirs
    ours = session(model, {"profiling_level": level, "profiling_file_path": str(ours_path)})
    ours.run(None, feeds)
    assert ours_path.read_text().splitlines()[0] == theirs_path.read_text().splitlines()[0]
    assert shape(_rows(ours_path)) == shape(_rows(theirs_path))
