"""scikit-learn classifiers converted by skl2onnx, against onnxruntime: the ai.onnx.ml paths
still run on onnx.reference (two-class LinearClassifier and TreeEnsembleClassifier, checked to
give onnxruntime's labels and scores for what skl2onnx emits), and string class labels held in
an initializer (they came out as bytes before ort-core decoded string initializers)."""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime
import pytest

import ort_core as ort

pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")


def _models():
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression, RidgeClassifier, SGDClassifier
    from sklearn.tree import DecisionTreeClassifier

    return {
        "logistic": lambda: LogisticRegression(),
        "ridge": lambda: RidgeClassifier(),
        "sgd-log": lambda: SGDClassifier(loss="log_loss", random_state=0),
        "forest": lambda: RandomForestClassifier(n_estimators=5, max_depth=4, random_state=0),
        "boosting": lambda: GradientBoostingClassifier(n_estimators=5, random_state=0),
        "tree": lambda: DecisionTreeClassifier(max_depth=3, random_state=0),
    }


@pytest.mark.parametrize("labels", ["ints", "strings"])
@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("name", ["logistic", "ridge", "sgd-log", "forest", "boosting", "tree"])
def test_sklearn_classifier_matches_onnxruntime(name, n_classes, labels):
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.datasets import make_classification

    x, y = make_classification(n_samples=150, n_features=6, n_informative=4, n_classes=n_classes,
                               n_clusters_per_class=1, random_state=n_classes)
    x = x.astype(np.float32)
    target = np.array(["ant", "bee", "cat"])[y] if labels == "strings" else y
    model = _models()[name]().fit(x, target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onx = skl2onnx.convert_sklearn(model, initial_types=[("x", FloatTensorType([None, 6]))],
                                       options={id(model): {"zipmap": False}},
                                       target_opset={"": 17, "ai.onnx.ml": 3})
    data = onx.SerializeToString()
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert got[0].dtype == want[0].dtype
    np.testing.assert_array_equal(got[0], want[0])
    assert got[1].shape == want[1].shape
    np.testing.assert_allclose(got[1], want[1], rtol=0, atol=1e-6)


@pytest.mark.parametrize("op", ["LinearClassifier", "LinearRegressor"])
def test_probit_post_transform_is_onnxruntimes(op):
    """onnxruntime's PROBIT is an approximate inverse erf, up to 5e-3 from the exact quantile
    the native kernels used before: its answer is the one given."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    if op == "LinearClassifier":
        node = helper.make_node(op, ["x"], ["l", "s"], domain="ai.onnx.ml", coefficients=rng.uniform(-0.3, 0.3, 9).tolist(),
                                intercepts=[0.1, 0.0, -0.1], classlabels_ints=[0, 1, 2], post_transform="PROBIT")
        outs = [helper.make_tensor_value_info("l", TensorProto.INT64, [None]),
                helper.make_tensor_value_info("s", TensorProto.FLOAT, [None, 3])]
    else:
        node = helper.make_node(op, ["x"], ["s"], domain="ai.onnx.ml", coefficients=rng.uniform(-0.3, 0.3, 3).tolist(),
                                intercepts=[0.4], post_transform="PROBIT")
        outs = [helper.make_tensor_value_info("s", TensorProto.FLOAT, [None, 1])]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])], outs)
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)]).SerializeToString()
    x = rng.uniform(0, 1, (50, 3)).astype(np.float32)
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g, w in zip(got, want):
        # near p = 0.5 onnxruntime's formula cancels catastrophically: one float32 ulp is ~1e-3
        np.testing.assert_allclose(g, w, rtol=0, atol=2e-3, equal_nan=True)


@pytest.mark.parametrize("post", ["NONE", "SOFTMAX"])
@pytest.mark.parametrize("labels", [[0, 1, 2, 3], [5, 7, 9, 11]])
def test_linear_classifier_compiled_finish_equals_the_numpy_path(post, labels, monkeypatch):
    """LinearClassifier's compiled finish (intercepts, argmax, softmax) gives the numpy path's
    labels and float32 scores exactly, NaN rows and ties included."""
    from onnx import TensorProto, helper

    from ort_ep_cpu.kernels import _jit

    if _jit.linear_finish() is None:
        pytest.skip("numba is not installed")
    rng = np.random.default_rng(4)
    node = helper.make_node("LinearClassifier", ["x"], ["label", "scores"], domain="ai.onnx.ml",
                            classlabels_ints=labels, coefficients=rng.standard_normal(4 * 6).tolist(),
                            intercepts=rng.standard_normal(4).tolist(), post_transform=post)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 6])],
                              [helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
                               helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, 4])])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("ai.onnx.ml", 1)]).SerializeToString()
    x = (5 * rng.standard_normal((500, 6))).astype(np.float32)
    x[3, 2] = np.nan
    x[4] = 0  # every score its intercept
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    monkeypatch.setattr(_jit, "USE", False)
    expected = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for a, b in zip(got, expected):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
