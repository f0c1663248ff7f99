"""The parity matrix (``ort_core.testing.parity``) fails a provider that computes a fused op
differently, naming the model, provider, level and output; and its zoo builds."""

from __future__ import annotations

import json
from typing import Any

import onnx
import pytest
from test_compare import WRONG, WrongGemm

import ort_core
from fake_providers import OnnxruntimeNodeProvider
from ort_core.testing import parity


@pytest.fixture
def providers(registry: Any) -> None:
    assert ort_core.register(OnnxruntimeNodeProvider(), "ort-cpu")
    assert ort_core.register(WrongGemm(WRONG), "wrong-gemm")


def test_a_wrong_fused_op_fails_only_the_levels_that_form_it(providers: None, tmp_path: Any) -> None:
    matrix = parity.run_matrix(model_names=["mlp"])
    cells = {(c.provider, c.level): c for c in matrix.cells}
    assert set(cells) == {(p, lv) for p in (WRONG, "CPUExecutionProvider") for lv in parity.LEVELS}
    for level in ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC"):  # no FusedGemm: the fallback runs it all
        assert cells[(WRONG, level)].passed, cells[(WRONG, level)]
    for level in ("ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL"):  # FusedGemm(Relu) formed, Relu dropped
        cell = cells[(WRONG, level)]
        assert not cell.passed and cell.message.startswith("output 'probs': max abs error")
        assert cell.on_provider.startswith(("2/", "3/"))
    assert all(cells[("CPUExecutionProvider", lv)].passed for lv in parity.LEVELS)
    table = matrix.table()
    assert "FAIL" in table and "WrongGemm" in table and "EXTENDED" in table
    path = tmp_path / "m.json"
    assert parity.main(["--models", "mlp", "--json", str(path)]) == 1
    saved = json.loads(path.read_text())
    assert len(saved["cells"]) == 8 and saved["levels"] == list(parity.LEVELS)


def test_unknown_model_is_named(providers: None) -> None:
    with pytest.raises(SystemExit):
        parity.main(["--models", "mlp,resnet9000"])


@pytest.mark.parametrize("name", [n for n in parity.ZOO if not n.startswith("qdq")])
def test_zoo_models_are_valid(name: str) -> None:
    onnx.checker.check_model(parity.ZOO[name](), full_check=True)
