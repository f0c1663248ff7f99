"""Many sessions in one process, concurrent runs on one session, handles freed at the end,
QNN's log in the ort_core logger."""

from __future__ import annotations

import gc
import logging
import threading

import numpy as np

from conftest import F, needs_qnn, one_node_model, reference, rel_error, session
from ort_core.testing import models
from ort_ep_qnn.runtime import LIVE

pytestmark = needs_qnn


def test_many_sessions_in_one_process_and_handles_freed():
    gc.collect()
    before = dict(LIVE)
    model = models.mlp(layers=1)
    feeds = models.random_inputs(model, batch=2, seed=0)
    expected = reference(model, feeds)
    sessions = [session(model, batch=2) for _ in range(6)]
    assert LIVE["backend"] == before["backend"] + 6
    assert LIVE["context"] >= before["context"] + 6
    for sess in sessions:
        assert rel_error(sess.run(None, feeds), expected) <= 1e-5
    del sess
    sessions.clear()
    gc.collect()
    assert LIVE == before


def test_concurrent_runs_on_one_session_give_the_serial_results():
    model = models.cnn()
    sess = session(model, batch=1)
    inputs = [models.random_inputs(model, batch=1, seed=k) for k in range(4)]
    serial = [sess.run(None, f)[0] for f in inputs]
    results: dict = {}
    errors: list = []

    def work(t):
        try:
            for r in range(3):
                k = (t + r) % 4
                results[(t, r)] = (k, sess.run(None, inputs[k])[0])
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors and len(results) == 12
    for k, out in results.values():
        np.testing.assert_array_equal(out, serial[k])


def test_qnn_log_goes_to_the_ort_core_logger_at_the_session_severity(caplog, capfd):
    import ort_core as ort

    model, feeds = one_node_model("Relu", [("x", (2, 3), F)], [("y", (2, 3), F)])
    verbose = ort.SessionOptions()
    verbose.log_severity_level = 0
    with caplog.at_level(logging.DEBUG, logger="ort_core"):
        sess = session(model, sess_options=verbose)
        sess.run(None, feeds)
    qnn = [r for r in caplog.records if r.name == "ort_core.qnn" and r.getMessage().startswith("QNN: ")]
    assert qnn, "QNN logged nothing at verbose severity"
    caplog.clear()
    capfd.readouterr()
    quiet = ort.SessionOptions()
    quiet.log_severity_level = 3  # errors only: QNN's verbose and warning lines are not passed on
    with caplog.at_level(logging.DEBUG, logger="ort_core"):
        sess = session(model, sess_options=quiet)
        np.testing.assert_array_equal(sess.run(None, feeds)[0], reference(model, feeds)[0])
    assert not [r for r in caplog.records if r.name == "ort_core.qnn" and r.levelno < logging.ERROR]
    out = capfd.readouterr().out
    assert "QNN" not in out and "<W>" not in out  # nothing of QNN's on stdout
