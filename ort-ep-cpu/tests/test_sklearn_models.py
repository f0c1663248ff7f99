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
