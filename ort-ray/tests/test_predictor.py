"""OrtPredictor on its own (no cluster): column mapping, batch formats, fixed batch sizes,
bad rows, model sources and the GPU resource logic."""

from __future__ import annotations

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto, helper

import ort_core
from ort_core.errors import InvalidArgument, NoSuchFile
from ort_core.testing import models
from ort_ray import OrtPredictor, predictor, predictor_resources


@pytest.fixture(scope="module")
def mlp_bytes() -> bytes:
    return models.mlp(in_features=16, hidden=32, layers=2, classes=4).SerializeToString()


def _fixed_batch_model(batch: int) -> bytes:
    """y = x * 2 + 1 with a fixed batch dimension (as exported with static shapes)."""
    nodes = [helper.make_node("Mul", ["x", "two"], ["t"]), helper.make_node("Add", ["t", "one"], ["y"])]
    graph = helper.make_graph(
        nodes, "fixed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]), helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _reference(model: bytes, x: np.ndarray) -> np.ndarray:
    session = ort_core.InferenceSession(model)
    return np.concatenate([session.run(None, {"x": x[i : i + 1]})[0] for i in range(len(x))])


def test_numpy_batch_matches_row_by_row_runs(mlp_bytes):
    x = np.random.default_rng(0).standard_normal((37, 16)).astype(np.float32)
    out = OrtPredictor(mlp_bytes)({"x": x, "id": np.arange(37)})
    np.testing.assert_allclose(out["probs"], _reference(mlp_bytes, x), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out["id"], np.arange(37))  # other columns pass through


def test_pandas_batch_and_column_mapping(mlp_bytes):
    x = np.random.default_rng(1).standard_normal((5, 16)).astype(np.float32)
    frame = pd.DataFrame({"features": list(x), "key": list("abcde")})
    out = OrtPredictor(mlp_bytes, input_columns={"x": "features"}, output_columns={"probs": "scores"})(frame)
    assert isinstance(out, pd.DataFrame)
    assert list(out["key"]) == list("abcde")
    np.testing.assert_allclose(np.stack(out["scores"]), _reference(mlp_bytes, x), rtol=1e-5, atol=1e-6)


def test_unknown_columns_are_named(mlp_bytes):
    with pytest.raises(InvalidArgument, match="'nope'.*not model inputs.*'x'"):
        OrtPredictor(mlp_bytes, input_columns={"nope": "x"})
    with pytest.raises(InvalidArgument, match="not model outputs"):
        OrtPredictor(mlp_bytes, output_columns={"z": "z"})
    with pytest.raises(InvalidArgument, match="reads column 'x', which the batch lacks"):
        OrtPredictor(mlp_bytes)({"features": np.zeros((2, 16), np.float32)})


@pytest.mark.parametrize("rows", [1, 4, 9, 12])
def test_fixed_batch_is_split_and_padded(rows):
    model = _fixed_batch_model(4)
    x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
    predictor_ = OrtPredictor(model)
    assert predictor_.fixed_batch == 4
    out = predictor_({"x": x})
    np.testing.assert_array_equal(out["y"], x * 2 + 1)
    assert out["y"].shape == (rows, 3)


def test_bad_row_raises_with_index_and_input(mlp_bytes):
    rows = np.empty(4, dtype=object)
    for i in range(4):
        rows[i] = np.zeros(16, np.float32)
    rows[2] = np.zeros(15, np.float32)  # wrong row shape
    with pytest.raises(InvalidArgument, match=r"row 2: input 'x'.*row shape \[15\], expected \[16\]"):
        OrtPredictor(mlp_bytes)({"x": rows})
    rows[2] = np.array(["a"] * 16)  # wrong dtype
    with pytest.raises(InvalidArgument, match=r"row 2: input 'x'.*dtype <U1 cannot be taken as float32"):
        OrtPredictor(mlp_bytes)({"x": rows})


def test_bad_rows_recorded_and_the_rest_run(mlp_bytes):
    x = np.random.default_rng(2).standard_normal((5, 16)).astype(np.float32)
    rows = np.empty(5, dtype=object)
    for i in range(5):
        rows[i] = x[i]
    rows[1] = np.zeros(3, np.float32)
    rows[4] = "text"
    out = OrtPredictor(mlp_bytes, on_error="record", error_column="err")({"x": rows})
    assert [bool(e) for e in out["err"]] == [False, True, False, False, True]
    assert "row 1: input 'x'" in out["err"][1] and "row 4: input 'x'" in out["err"][4]
    good = [0, 2, 3]
    np.testing.assert_allclose(out["probs"][good], _reference(mlp_bytes, x[good]), rtol=1e-5, atol=1e-6)
    assert np.isnan(out["probs"][[1, 4]]).all()  # bad rows are marked, never silently zero


def test_model_from_path_and_uri(tmp_path, mlp_bytes):
    path = tmp_path / "m.onnx"
    path.write_bytes(mlp_bytes)
    x = np.ones((2, 16), np.float32)
    expected = OrtPredictor(mlp_bytes)({"x": x})["probs"]
    np.testing.assert_array_equal(OrtPredictor(str(path))({"x": x})["probs"], expected)
    np.testing.assert_array_equal(OrtPredictor(path.as_uri())({"x": x})["probs"], expected)
    with pytest.raises(NoSuchFile, match="missing.onnx"):
        OrtPredictor((tmp_path / "missing.onnx").as_uri())


def test_gpu_providers_ask_ray_for_gpus():
    assert predictor_resources(["CPUExecutionProvider"]) == {}
    assert predictor_resources(["CUDAExecutionProvider", "CPUExecutionProvider"]) == {"num_gpus": 1}
    assert predictor_resources([("TensorrtExecutionProvider", {}), "CPUExecutionProvider"], 0.5) == {"num_gpus": 0.5}


def test_device_id_set_on_gpu_providers_only():
    providers = predictor._with_device_ids(
        ["CUDAExecutionProvider", ("TensorrtExecutionProvider", {"device_id": 3}), "CPUExecutionProvider"], 1
    )
    assert providers == [("CUDAExecutionProvider", {"device_id": 1}),
                         ("TensorrtExecutionProvider", {"device_id": 3}), "CPUExecutionProvider"]


def test_on_error_value_checked(mlp_bytes):
    with pytest.raises(InvalidArgument, match="on_error='skip'"):
        OrtPredictor(mlp_bytes, on_error="skip")


def test_predictor_is_picklable_before_construction(mlp_bytes):
    # Ray ships the class and its constructor arguments to the actors, never a built session
    import pickle

    assert pickle.loads(pickle.dumps(OrtPredictor)) is OrtPredictor
    onnx.load_from_string(pickle.loads(pickle.dumps(mlp_bytes)))
