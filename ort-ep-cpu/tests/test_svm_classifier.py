"""SVMClassifier against onnxruntime's kernel: scikit-learn SVMs converted by skl2onnx (the
models people ship), and hand-made nodes over the attribute forms that change the answer
(kernel types, with and without prob_a/prob_b, two and more classes, post transforms, string
labels, liblinear mode)."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import ort_core as ort

ML = "ai.onnx.ml"
F = TensorProto.FLOAT


def _both(model_bytes: bytes, x: np.ndarray):
    want = onnxruntime.InferenceSession(model_bytes, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    return got, want


def _check(got, want, atol, equal_nan=False):
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
    assert got[1].shape == want[1].shape and got[1].dtype == want[1].dtype
    np.testing.assert_allclose(got[1], want[1], rtol=0, atol=atol, equal_nan=equal_nan)


@pytest.mark.parametrize("kernel", ["rbf", "linear", "poly", "sigmoid"])
@pytest.mark.parametrize("n_classes", [2, 3, 4])
@pytest.mark.parametrize("probability", [True, False])
def test_sklearn_svc_matches_onnxruntime(kernel, n_classes, probability):
    pytest.importorskip("sklearn")
    skl2onnx = pytest.importorskip("skl2onnx")
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.datasets import make_classification
    from sklearn.svm import SVC

    x, y = make_classification(n_samples=120, n_features=6, n_informative=4, n_classes=n_classes,
                               n_clusters_per_class=1, random_state=n_classes)
    model = SVC(kernel=kernel, probability=probability, random_state=0, gamma="scale").fit(x, y)
    onx = skl2onnx.convert_sklearn(model, initial_types=[("x", FloatTensorType([None, 6]))],
                                   options={id(model): {"zipmap": False}}, target_opset={"": 17, ML: 3})
    got, want = _both(onx.SerializeToString(), x.astype(np.float32))
    # probabilities: both iterate libsvm's coupling in float32 to onnxruntime's stopping rule
    _check(got, want, atol=2e-5)


def test_sklearn_linear_svc_matches_onnxruntime():
    skl2onnx = pytest.importorskip("skl2onnx")
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.datasets import make_classification
    from sklearn.svm import SVC

    x, y = make_classification(n_samples=80, n_features=5, n_classes=3, n_informative=3, random_state=1)
    model = SVC(kernel="linear", decision_function_shape="ovo").fit(x, y)
    onx = skl2onnx.convert_sklearn(model, initial_types=[("x", FloatTensorType([None, 5]))],
                                   options={id(model): {"zipmap": False}}, target_opset={"": 17, ML: 3})
    got, want = _both(onx.SerializeToString(), x.astype(np.float32))
    _check(got, want, atol=2e-5)


def _node_model(**attrs) -> bytes:
    n_out = 2 if "classlabels_ints" in attrs and len(attrs["classlabels_ints"]) == 2 else None
    label_type = TensorProto.STRING if "classlabels_strings" in attrs else TensorProto.INT64
    node = helper.make_node("SVMClassifier", ["x"], ["label", "scores"], domain=ML, **attrs)
    graph = helper.make_graph(
        [node], "svm", [helper.make_tensor_value_info("x", F, [None, 3])],
        [helper.make_tensor_value_info("label", label_type, [None]),
         helper.make_tensor_value_info("scores", F, [None, n_out])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)])
    return model.SerializeToString()


def _svc_attrs(rng, k, kernel_type, proba, post, strings=False):
    per_class = [2] * k
    n_sv = sum(per_class)
    attrs = dict(
        kernel_type=kernel_type, kernel_params=[0.4, 0.2, 3.0], vectors_per_class=per_class,
        support_vectors=rng.standard_normal(n_sv * 3).tolist(),
        coefficients=rng.standard_normal((k - 1) * n_sv).tolist(),
        rho=rng.standard_normal(k * (k - 1) // 2).tolist(), post_transform=post,
    )
    if proba:
        attrs["prob_a"] = (-rng.uniform(0.5, 3, k * (k - 1) // 2)).tolist()
        attrs["prob_b"] = rng.uniform(-0.3, 0.3, k * (k - 1) // 2).tolist()
    if strings:
        attrs["classlabels_strings"] = [f"c{i}" for i in range(k)]
    else:
        attrs["classlabels_ints"] = list(range(10, 10 + k))
    return attrs


@pytest.mark.parametrize("k", [2, 3, 5])
@pytest.mark.parametrize("kernel_type", ["LINEAR", "POLY", "RBF", "SIGMOID"])
@pytest.mark.parametrize("proba", [False, True])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"])
def test_svc_node_forms_match_onnxruntime(k, kernel_type, proba, post):
    if k == 2 and not proba and post == "PROBIT":
        pytest.skip("onnxruntime leaves the second column unset (declined: test_binary_probit_is_declined)")
    rng = np.random.default_rng(k * 7 + len(kernel_type))
    model = _node_model(**_svc_attrs(rng, k, kernel_type, proba, post, strings=(k == 3)))
    x = rng.standard_normal((64, 3)).astype(np.float32)
    got, want = _both(model, x)
    # PROBIT: onnxruntime's approximate inverse erf cancels catastrophically near p = 0.5
    # (-v + sqrt(v^2 - v2) in float32, then a square root): one ulp there is ~1e-3 out
    _check(got, want, atol=2e-3 if post == "PROBIT" else 2e-5, equal_nan=True)


@pytest.mark.parametrize("k", [3, 4])
def test_svc_probit_matches_onnxruntime_approximation(k):
    # onnxruntime's PROBIT is an approximate inverse erf: matched, not the exact quantile
    rng = np.random.default_rng(3)
    model = _node_model(**_svc_attrs(rng, k, "RBF", True, "PROBIT"))
    got, want = _both(model, rng.standard_normal((32, 3)).astype(np.float32))
    _check(got, want, atol=1e-5)


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("signs", ["positive", "mixed"])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_liblinear_mode_matches_onnxruntime(k, signs, post):
    rng = np.random.default_rng(k)
    coef = rng.uniform(0, 0.4, 3 * k) if signs == "positive" else rng.standard_normal(3 * k)
    model = _node_model(kernel_type="LINEAR", kernel_params=[0.0, 0.0, 0.0], coefficients=coef.tolist(), rho=[0.1], post_transform=post,
                        classlabels_ints=list(range(k)))
    x = rng.uniform(0, 1.5, (64, 3)).astype(np.float32)
    got, want = _both(model, x)
    _check(got, want, atol=1e-6)


def test_ties_in_votes_pick_the_first_class_like_onnxruntime():
    # three classes, each pair's decision exactly 0 -> the second class of each pair wins
    # a vote (onnxruntime votes for j unless the score is > 0): votes (0, 1, 2) -> class 2;
    # with rho chosen so each class wins one pair, the first class of the tie wins
    attrs = dict(kernel_type="LINEAR", kernel_params=[0.0, 0.0, 0.0], vectors_per_class=[1, 1, 1], support_vectors=[0.0] * 9,
                 coefficients=[0.0] * 6, rho=[1.0, -1.0, 1.0], classlabels_ints=[0, 1, 2])
    got, want = _both(_node_model(**attrs), np.ones((2, 3), np.float32))
    _check(got, want, atol=0)
    attrs["rho"] = [0.0, 0.0, 0.0]
    got, want = _both(_node_model(**attrs), np.ones((2, 3), np.float32))
    _check(got, want, atol=0)


def test_inconsistent_attributes_are_a_clear_error():
    rng = np.random.default_rng(0)
    attrs = _svc_attrs(rng, 3, "RBF", False, "NONE")
    attrs["rho"] = [0.0]
    with pytest.raises(ort.OrtError, match="rho"):
        ort.InferenceSession(_node_model(**attrs), providers=["CPUExecutionProvider"])


def test_binary_probit_is_declined():
    rng = np.random.default_rng(0)
    model = _node_model(**_svc_attrs(rng, 2, "RBF", False, "PROBIT"))
    with pytest.raises(ort.OrtError, match="PROBIT"):
        ort.InferenceSession(model, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("k", [2, 3, 5, 10])
def test_compiled_coupling_is_the_numpy_one(k):
    """The compiled pairwise coupling (``_jit.pairwise_coupling``) takes onnxruntime's float32
    steps in its order, as the numpy form does: the same bits, iteration cap and stop rule."""
    pytest.importorskip("numba", reason="numba (optional) is not installed")
    from ort_ep_cpu.kernels import _jit, svm

    assert _jit.pairwise_coupling() is not None
    rng = np.random.default_rng(k)
    upper = rng.uniform(1e-7, 1 - 1e-7, (50, k, k)).astype(np.float32)
    r = np.zeros((50, k, k), np.float32)
    for i in range(k):
        for j in range(i + 1, k):
            r[:, i, j] = upper[:, i, j]
            r[:, j, i] = np.float32(1) - upper[:, i, j]
    np.testing.assert_array_equal(svm._coupled(r).view(np.uint32), svm._coupling(r).view(np.uint32))


@pytest.mark.parametrize("degree", [0.0, 1.0, 2.0, 3.0, 4.0, 2.5, 9.0])
def test_polynomial_kernel_power(degree):
    """The POLY kernels' power by repeated products for whole degrees up to 8 (numpy's pow
    otherwise): the same values to float64 rounding, the input untouched."""
    from ort_ep_cpu.kernels.elementwise import whole_power

    base = np.random.default_rng(3).uniform(-3, 3, (8, 40))
    kept = base.copy()
    with np.errstate(invalid="ignore"):  # a negative base to the power 2.5: NaN both ways
        np.testing.assert_allclose(whole_power(base, degree), np.power(base, degree), rtol=1e-14, equal_nan=True)
    np.testing.assert_array_equal(base, kept)
