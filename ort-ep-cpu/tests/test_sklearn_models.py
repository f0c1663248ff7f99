"""scikit-learn classifiers converted by skl2onnx, against onnxruntime (two-class models
included, and string class labels held in an initializer: they came out as bytes before
ort-core decoded string initializers); the ai.onnx.ml kernels' edge cases (an empty batch,
infinite features, NaN scores, one-row linear classifiers)."""

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


def _fitted(name: str):
    from sklearn.datasets import make_classification
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import SVC, SVR

    x, y = make_classification(n_samples=120, n_features=6, n_informative=4, n_classes=3, n_clusters_per_class=1,
                               random_state=1)
    x = x.astype(np.float32)
    model = {"forest-classifier": lambda: RandomForestClassifier(n_estimators=4, max_depth=3, random_state=0),
             "forest-regressor": lambda: RandomForestRegressor(n_estimators=4, max_depth=3, random_state=0),
             "logistic": lambda: LogisticRegression(),
             "svc-rbf": lambda: SVC(probability=True, random_state=0),
             "svr-rbf": lambda: SVR()}[name]()
    model.fit(x, y.astype(np.float32) if name.endswith("regressor") or name.startswith("svr") else y)
    from skl2onnx.common.data_types import FloatTensorType

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onx = skl2onnx.convert_sklearn(model, initial_types=[("x", FloatTensorType([None, 6]))],
                                       options={id(model): {"zipmap": False}} if hasattr(model, "classes_") else None,
                                       target_opset={"": 17, "ai.onnx.ml": 3})
    return onx.SerializeToString(), x


def _same_as_onnxruntime(data: bytes, x: np.ndarray) -> None:
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        options = ort.SessionOptions()
        options.graph_optimization_level = level
        got = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"]).run(None, {"x": x})
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("name", ["forest-classifier", "forest-regressor", "logistic", "svc-rbf", "svr-rbf"])
def test_ml_models_take_an_empty_batch(name):
    """Zero rows: onnxruntime's empty outputs (the tree and SVM kernels'
    ``reshape(0, -1)`` failed: -1 cannot be worked out from zero elements)."""
    data, x = _fitted(name)
    _same_as_onnxruntime(data, x[:0])


@pytest.mark.parametrize("name", ["svc-rbf", "svr-rbf"])
def test_rbf_svm_of_an_infinite_feature_is_onnxruntimes(name):
    """A row holding +-inf: the RBF kernel is 0 there (an infinite distance), as onnxruntime's
    sum of squared differences gives it; the expansion |x|^2 - 2 x.sv + |sv|^2 made it NaN."""
    data, x = _fitted(name)
    x = x[:8].copy()
    x[1, 0], x[2, 3], x[3, :2] = np.inf, -np.inf, (np.inf, -np.inf)
    _same_as_onnxruntime(data, x)


@pytest.mark.parametrize("compiled", [True, False])
def test_linear_classifier_labels_of_nan_scores_are_onnxruntimes(compiled, monkeypatch):
    """Scores holding NaN (inputs with infinities of both signs): the label is
    ``std::max_element``'s, as onnxruntime's (a NaN is never the maximum after the first
    place; a row starting with NaN gives the first class), where numpy's argmax took the
    first NaN."""
    from ort_ep_cpu.kernels import _jit

    if compiled and _jit.linear_finish() is None:
        pytest.skip("numba is not installed")
    if not compiled:
        monkeypatch.setattr(_jit, "USE", False)
    data, x = _fitted("logistic")
    x = np.repeat(x[:16], 4, axis=0)
    rng = np.random.default_rng(2)
    for row in range(0, len(x), 2):  # infinities of both signs in two features: some scores NaN
        x[row, rng.choice(6, 2, replace=False)] = (np.inf, -np.inf)
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert np.isnan(want[1]).any(axis=1).sum() >= 8  # the case is there
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-7, equal_nan=True)


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"])
@pytest.mark.parametrize("labels", [[3, 7], ["no", "yes"]])
def test_one_row_linear_classifier_is_onnxruntimes(post, labels):
    """Two classes of one coefficient row and one intercept: onnxruntime's label (s > 0) and
    its derived scores ([1 - s, s], logistic(s) for LOGISTIC; PROBIT's probit(s) packed into the
    first N values), where onnx.reference (which ran it) wrote [-s, s]."""
    from onnx import TensorProto, helper

    strings = isinstance(labels[0], str)
    node = helper.make_node("LinearClassifier", ["x"], ["label", "scores"], domain="ai.onnx.ml",
                            coefficients=[1.0, -1.0, 0.5], intercepts=[0.1], post_transform=post,
                            **{"classlabels_strings" if strings else "classlabels_ints": labels})
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
                              [helper.make_tensor_value_info("label", TensorProto.STRING if strings else TensorProto.INT64,
                                                             [None]),
                               helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, 2])])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("ai.onnx.ml", 1)]).SerializeToString()
    x = np.random.default_rng(3).uniform(-1, 1, (40, 3)).astype(np.float32)
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])
    if post == "PROBIT":  # the values onnxruntime writes (the rest of its buffer is not written)
        np.testing.assert_allclose(got[1].reshape(-1)[:len(x)], want[1].reshape(-1)[:len(x)], rtol=1e-5, atol=1e-5,
                                   equal_nan=True)
    else:
        np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-6, equal_nan=True)
    assert session.get_placement().nodes[0].note == ""  # native, not onnx.reference


def test_feature_vectorizer_takes_an_empty_batch():
    """FeatureVectorizer of zero rows: (0, sum of inputdimensions) (``reshape(0, -1)`` failed).
    onnxruntime 1.32 ends the process on this model, so the shape is checked, not its output."""
    from onnx import TensorProto, helper

    node = helper.make_node("FeatureVectorizer", ["a", "b"], ["y"], domain="ai.onnx.ml", inputdimensions=[3, 2])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [None, 3]),
                                            helper.make_tensor_value_info("b", TensorProto.FLOAT, [None, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("ai.onnx.ml", 1)]).SerializeToString()
    feeds = {"a": np.zeros((0, 3), np.float32), "b": np.zeros((0, 2), np.float32)}
    (y,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    assert y.shape == (0, 5) and y.dtype == np.float32
