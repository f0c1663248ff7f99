"""The conformance harness: loading onnx's backend cases, comparing as onnx's runner does,
scoring, and the command line (run against the host test provider, not a real one)."""

from __future__ import annotations

import copy
import dataclasses
import json

import ml_dtypes
import numpy as np
import pytest

import ort_core
from ort_core.testing import conformance as cf
from ort_core.testing.conformance import Mismatch, compare_value


@pytest.fixture(scope="module")
def relu_cases():
    return cf.load_cases(("node",), pattern=r"^test_relu$|^test_add$|^test_softmax_example$")


# ------------------------------------------------------------------------------ comparing
def test_compare_accepts_within_tolerance_and_equal_nans():
    e = np.array([1.0, np.nan, np.inf, -np.inf], dtype=np.float32)
    compare_value(e, e * np.float32(1 + 1e-4), 1e-3, 1e-7)


@pytest.mark.parametrize(
    "actual, message",
    [
        (np.array([1.0, 2.0], dtype=np.float64), "dtype float64"),
        (np.array([[1.0, 2.0]], dtype=np.float32), "shape [1, 2]"),
        (np.array([1.0, 2.1], dtype=np.float32), "1/2 elements differ"),
        (np.array([1.0, np.nan], dtype=np.float32), "1/2 elements differ"),
        ([np.array([1.0, 2.0], dtype=np.float32)], "expected a tensor"),
    ],
)
def test_compare_rejects(actual, message):
    with pytest.raises(Mismatch, match=message.replace("[", r"\[").replace("]", r"\]")):
        compare_value(np.array([1.0, 2.0], dtype=np.float32), actual, 1e-3, 1e-7)


def test_compare_bfloat16_uses_two_ulps():
    e = np.array([1.0, 100.0], dtype=ml_dtypes.bfloat16)
    a = np.array([1.0078125, 100.5], dtype=ml_dtypes.bfloat16)  # one bfloat16 ULP off
    compare_value(e, a, 1e-3, 1e-7)
    with pytest.raises(Mismatch):
        compare_value(e, np.array([1.1, 100.0], dtype=ml_dtypes.bfloat16), 1e-3, 1e-7)


def test_compare_float8_exact_values():
    e = np.array([1.0, 448.0], dtype=ml_dtypes.float8_e4m3fn)
    compare_value(e, e.copy(), 1e-3, 1e-7)
    with pytest.raises(Mismatch, match="dtype"):
        compare_value(e, e.astype(ml_dtypes.float8_e5m2), 1e-3, 1e-7)


def test_compare_strings_sequences_and_optionals():
    compare_value(np.array(["a", "b"], dtype=object), np.array(["a", "b"], dtype=object), 1e-3, 1e-7)
    with pytest.raises(Mismatch, match="strings differ"):
        compare_value(np.array(["a", "b"], dtype=object), np.array(["a", "c"], dtype=object), 1e-3, 1e-7)
    seq = [np.ones(2, np.float32), np.zeros(3, np.int64)]
    compare_value(seq, [s.copy() for s in seq], 1e-3, 1e-7)
    with pytest.raises(Mismatch, match="sequence of 2, got 1"):
        compare_value(seq, seq[:1], 1e-3, 1e-7)
    compare_value(None, None, 1e-3, 1e-7)
    with pytest.raises(Mismatch, match="empty optional"):
        compare_value(None, np.ones(1), 1e-3, 1e-7)


# ------------------------------------------------------------------------------ loading
def test_unknown_set_names_the_valid_ones():
    with pytest.raises(ValueError, match="valid sets: node, simple"):
        cf.load_cases(("nodes",))


def test_node_cases_carry_model_data_and_op(relu_cases):
    names = {c.name for c in relu_cases}
    assert names == {"test_relu", "test_add", "test_softmax_example"}
    relu = next(c for c in relu_cases if c.name == "test_relu")
    assert relu.op == "Relu" and relu.set == "node" and relu.op_types == ("Relu",)
    (inputs, expected), = relu.data_sets
    assert inputs[0].shape == expected[0].shape and (relu.rtol, relu.atol) == (1e-3, 1e-7)


def test_file_sets_load_with_their_data():
    cases = cf.load_cases(("pytorch-operator",))
    assert len(cases) >= 30
    assert all(c.data_sets and c.data_sets[0][0] for c in cases)


# ------------------------------------------------------------------------------ running
def test_run_case_passes_fails_and_errors(host, relu_cases):
    by_name = {c.name: c for c in relu_cases}
    passed = cf.run_case(by_name["test_relu"], ["CPUExecutionProvider"])
    assert passed.status == "passed", passed.message
    assert passed.nodes == {"CPUExecutionProvider": 1}

    wrong = copy.deepcopy(by_name["test_relu"])
    wrong.data_sets[0][1][0] += 1
    failed = cf.run_case(wrong, ["CPUExecutionProvider"])
    assert failed.status == "failed" and "elements differ" in failed.message

    # the host test provider has no Softmax kernel: an error naming the op, grouped under it
    errored = cf.run_case(by_name["test_softmax_example"], ["CPUExecutionProvider"])
    assert errored.status == "errored" and "Softmax" in errored.message and errored.op == "Softmax"


def test_suite_score_json_table_and_regressions(host, relu_cases):
    score = cf.run_suite(relu_cases, ["CPUExecutionProvider"])
    data = score.to_json()
    assert data["sets"]["node"] == {"passed": 2, "failed": 0, "errored": 1, "total": 3}
    assert list(data["failures"]) == ["Softmax"]
    assert "node" in score.table() and "Softmax (1)" in score.table()
    assert score.regressions({"sets": {"node": {"passed": 2}}}) == []
    assert score.regressions({"sets": {"node": {"passed": 3}}}) == ["set node: 2 passed, recorded 3"]


def test_main_gates_on_the_recorded_score(host, tmp_path, capsys):
    record = tmp_path / "score.json"
    out = tmp_path / "out.json"
    args = ["--sets", "node", "-k", "^test_relu$", "--write-score", str(record), "--json", str(out)]
    assert cf.main(args) == 0
    assert json.loads(record.read_text())["sets"]["node"]["passed"] == 1
    assert json.loads(out.read_text())["passed_cases"] == ["node/test_relu"]
    assert cf.main(["--sets", "node", "-k", "^test_relu$", "--min-score", str(record)]) == 0
    recorded = json.loads(record.read_text())
    recorded["sets"]["node"]["passed"] = 2
    record.write_text(json.dumps(recorded))
    assert cf.main(["--sets", "node", "-k", "^test_relu$", "--min-score", str(record)]) == 1
    assert "dropped below" in capsys.readouterr().err


class _DelegationNote:
    """A cross-cutting plugin marking the Relu kernel as delegated, as a provider's note would."""

    @ort_core.hookimpl(wrapper=True)
    def ort_create_kernel(self, ep, request):
        kernel = yield
        if kernel is not None and request.node.op_type == "Relu":
            return dataclasses.replace(kernel, note="delegated to onnx.reference")
        return kernel


def test_suite_reports_delegated_ops(host, relu_cases):
    assert ort_core.register(_DelegationNote(), "delegation-note")
    score = cf.run_suite(relu_cases, ["CPUExecutionProvider"])
    assert score.delegated_ops() == {"CPUExecutionProvider": ["Relu"]}
    assert score.to_json()["delegated_ops"] == {"CPUExecutionProvider": ["Relu"]}
    assert "delegated by CPUExecutionProvider: 1 op(s): Relu" in score.table()
