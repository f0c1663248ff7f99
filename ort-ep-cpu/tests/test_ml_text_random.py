"""ai.onnx.ml, string and random kernels: against onnxruntime (rtol 1e-5), or statistically."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import ort_core as ort

F, I64, S = TensorProto.FLOAT, TensorProto.INT64, TensorProto.STRING
ML = "ai.onnx.ml"


def _model(node, inputs, outputs, opset=21, ml_opset=5):
    graph = helper.make_graph([node], "g", inputs, outputs)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(ML, ml_opset)]
    )
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _compare(model, feeds, rtol=1e-5):
    ours = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    theirs = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        if isinstance(b, list):  # ZipMap: list of dicts
            assert a == pytest.approx(b)
            continue
        assert a.shape == b.shape, (a.shape, b.shape)
        if b.dtype == object:
            assert a.tolist() == b.tolist()
        else:
            assert a.dtype == b.dtype
            np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-6)


X = np.array([[0.5, -1.0, 3.0, 0.0], [2.0, 0.25, -0.5, 1.5], [-3.0, 4.0, 1.0, np.nan]], dtype=np.float32)


def _tree_ensemble():
    # two trees over 4 features, 2 targets; tree 1 uses set membership
    node = helper.make_node(
        "TreeEnsemble", ["x"], ["y"], domain=ML,
        nodes_featureids=[0, 1, 2, 3], nodes_splits=helper.make_tensor("s", F, [4], [0.4, 0.0, 0.5, 0.0]),
        nodes_modes=helper.make_tensor("m", TensorProto.UINT8, [4], [0, 3, 6, 1]),
        nodes_truenodeids=[1, 0, 3, 2], nodes_trueleafs=[0, 1, 0, 1],
        nodes_falsenodeids=[2, 1, 4, 3], nodes_falseleafs=[1, 1, 1, 1],
        leaf_targetids=[0, 1, 0, 1, 0], leaf_weights=helper.make_tensor("w", F, [5], [1.0, 2.0, 3.0, 4.0, 5.0]),
        membership_values=helper.make_tensor("mv", F, [3], [1.0, 3.0, np.nan]),
        tree_roots=[0, 2], n_targets=2, aggregate_function=1, post_transform=0,
    )
    return _model(node, [_vi("x", F, [None, 4])], [_vi("y", F, [None, 2])]), {"x": np.nan_to_num(X)}


CASES = {
    "label_encoder_str_to_int": (
        lambda: _model(
            helper.make_node("LabelEncoder", ["x"], ["y"], domain=ML, keys_strings=["a", "b", "c"],
                             values_int64s=[7, 8, 9], default_int64=-5),
            [_vi("x", S, [None])], [_vi("y", I64, [None])]),
        {"x": np.array(["a", "z", "c", "b"], dtype=object)},
    ),
    "label_encoder_float_to_str": (
        lambda: _model(
            helper.make_node("LabelEncoder", ["x"], ["y"], domain=ML, keys_floats=[0.5, 2.0, -1.0],
                             values_strings=["half", "two", "minus"]),
            [_vi("x", F, [None])], [_vi("y", S, [None])]),
        {"x": np.array([2.0, 0.5, 3.0, -1.0], dtype=np.float32)},
    ),
    "tree_ensemble": (_tree_ensemble, None),
    "binarizer": (
        lambda: _model(helper.make_node("Binarizer", ["x"], ["y"], domain=ML, threshold=0.3),
                       [_vi("x", F, [None, 4])], [_vi("y", F, [None, 4])]),
        {"x": np.nan_to_num(X)},
    ),
    "normalizer_l2": (
        lambda: _model(helper.make_node("Normalizer", ["x"], ["y"], domain=ML, norm="L2"),
                       [_vi("x", F, [None, 4])], [_vi("y", F, [None, 4])]),
        {"x": np.nan_to_num(X)},
    ),
    "normalizer_zero_rows": (  # a row whose norm is 0 stays as it is (a TF-IDF row of an empty document)
        lambda: _model(helper.make_node("Normalizer", ["x"], ["y"], domain=ML, norm="L2"),
                       [_vi("x", F, [None, 3])], [_vi("y", F, [None, 3])]),
        {"x": np.array([[0, 0, 0], [3, 0, 4]], np.float32)},
    ),
    "normalizer_l1_zero_row": (
        lambda: _model(helper.make_node("Normalizer", ["x"], ["y"], domain=ML, norm="L1"),
                       [_vi("x", F, [None, 3])], [_vi("y", F, [None, 3])]),
        {"x": np.array([[0, 0, 0], [1, -1, 2]], np.float32)},
    ),
    "normalizer_max_of_zero": (
        lambda: _model(helper.make_node("Normalizer", ["x"], ["y"], domain=ML, norm="MAX"),
                       [_vi("x", F, [None, 3])], [_vi("y", F, [None, 3])]),
        {"x": np.array([[-3, -1, 0], [1, 4, 2]], np.float32)},
    ),
    "scaler": (
        lambda: _model(helper.make_node("Scaler", ["x"], ["y"], domain=ML, offset=[1.0, 2.0, 3.0, 4.0], scale=[2.0, 1.0, 0.5, -1.0]),
                       [_vi("x", F, [None, 4])], [_vi("y", F, [None, 4])]),
        {"x": np.nan_to_num(X)},
    ),
    "imputer_nan": (
        lambda: _model(helper.make_node("Imputer", ["x"], ["y"], domain=ML, imputed_value_floats=[9.0, 8.0, 7.0, 6.0],
                                        replaced_value_float=float("nan")),
                       [_vi("x", F, [None, 4])], [_vi("y", F, [None, 4])]),
        {"x": X},
    ),
    "linear_regressor": (
        lambda: _model(helper.make_node("LinearRegressor", ["x"], ["y"], domain=ML, targets=2,
                                        coefficients=[1.0, 2.0, 3.0, 4.0, -1.0, 0.5, 0.0, 2.0], intercepts=[0.5, -0.5]),
                       [_vi("x", F, [None, 4])], [_vi("y", F, [None, 2])]),
        {"x": np.nan_to_num(X)},
    ),
    "array_feature_extractor": (
        lambda: _model(helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain=ML),
                       [_vi("x", F, [None, 4]), _vi("i", I64, [2])], [_vi("y", F, [None, 2])]),
        {"x": np.nan_to_num(X), "i": np.array([3, 1], dtype=np.int64)},
    ),
    "category_mapper": (
        lambda: _model(helper.make_node("CategoryMapper", ["x"], ["y"], domain=ML, cats_strings=["x", "y"],
                                        cats_int64s=[4, 2]),
                       [_vi("x", S, [None])], [_vi("y", I64, [None])]),
        {"x": np.array(["y", "q", "x"], dtype=object)},
    ),
    "one_hot_encoder": (
        lambda: _model(helper.make_node("OneHotEncoder", ["x"], ["y"], domain=ML, cats_int64s=[3, 1, 4]),
                       [_vi("x", I64, [None, 2])], [_vi("y", F, [None, 2, 3])]),
        {"x": np.array([[1, 4], [9, 3]], dtype=np.int64)},
    ),
    "feature_vectorizer": (
        lambda: _model(helper.make_node("FeatureVectorizer", ["a", "b"], ["y"], domain=ML, inputdimensions=[2, 3]),
                       [_vi("a", F, [None, 2]), _vi("b", F, [None, 3])], [_vi("y", F, [None, 5])]),
        {"a": np.ones((2, 2), np.float32), "b": np.arange(6, dtype=np.float32).reshape(2, 3)},
    ),
    "string_normalizer": (
        lambda: _model(helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action="UPPER",
                                        is_case_sensitive=0, stopwords=["the", "A"], locale="C"),
                       [_vi("x", S, [None])], [_vi("y", S, [None])]),
        {"x": np.array(["The", "cat", "a", "sat"], dtype=object)},
    ),
    "string_concat": (
        lambda: _model(helper.make_node("StringConcat", ["a", "b"], ["y"]),
                       [_vi("a", S, [2, 1]), _vi("b", S, [3])], [_vi("y", S, [2, 3])]),
        {"a": np.array([["x"], ["yy"]], dtype=object), "b": np.array(["1", "", "3"], dtype=object)},
    ),
    "string_split": (
        lambda: _model(helper.make_node("StringSplit", ["x"], ["y", "n"], delimiter="-", maxsplit=2),
                       [_vi("x", S, [3])], [_vi("y", S, [3, None]), _vi("n", I64, [3])]),
        {"x": np.array(["a-b-c-d", "", "e--f"], dtype=object)},
    ),
    "regex_full_match": (
        lambda: _model(helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=r"[a-z]+\d*"),
                       [_vi("x", S, [4])], [_vi("y", TensorProto.BOOL, [4])]),
        {"x": np.array(["abc12", "ABC", "x", "a1b"], dtype=object)},
    ),
}


def _tfidf(pool, mode, skip, weights=None, strings=False):
    attrs = dict(mode=mode, min_gram_length=1, max_gram_length=3, max_skip_count=skip,
                 ngram_counts=[0, 4, 8], ngram_indexes=[6, 5, 4, 3, 2, 1, 0])
    attrs["pool_strings" if strings else "pool_int64s"] = pool
    if weights:
        attrs["weights"] = weights
    elem = S if strings else I64
    return lambda: _model(helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs),
                          [_vi("x", elem, [None, 12])], [_vi("y", F, [None, 7])], opset=9)


_INTS = np.random.default_rng(0).integers(0, 6, size=(3, 12)).astype(np.int64)
_POOL = [1, 2, 3, 4, 1, 2, 2, 3, 1, 2, 3]  # 4 unigrams, 2 bigrams, 1 trigram
CASES.update({
    "tfidf_tf_skip2": (_tfidf(_POOL, "TF", 2), {"x": _INTS}),
    "tfidf_idf_weights": (_tfidf(_POOL, "IDF", 1, weights=[0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), {"x": _INTS}),
    "tfidf_tfidf_strings": (
        _tfidf([str(v) for v in _POOL], "TFIDF", 3, weights=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], strings=True),
        {"x": _INTS.astype(str).astype(object)},
    ),
})


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_onnxruntime(name):
    build, feeds = CASES[name]
    built = build()
    model, feeds = built if feeds is None else (built, feeds)
    _compare(model, feeds)


def test_zip_map_returns_a_list_of_dicts():
    node = helper.make_node("ZipMap", ["x"], ["y"], domain=ML, classlabels_strings=["no", "yes"])
    out_type = helper.make_sequence_type_proto(helper.make_map_type_proto(S, helper.make_tensor_type_proto(F, [])))
    model = _model(node, [_vi("x", F, [None, 2])], [helper.make_value_info("y", out_type)], ml_opset=1)
    x = np.array([[0.25, 0.75], [1.0, 0.0]], dtype=np.float32)
    (y,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    assert y == [{"no": 0.25, "yes": 0.75}, {"no": 1.0, "yes": 0.0}]


# ------------------------------------------------------------------------------ random


def _random_model(node, inputs=(), out_shape=(200_000,), out_type=F):
    return _model(node, list(inputs), [_vi("y", out_type, list(out_shape))])


def _run(model, feeds=None, session=None):
    session = session or ort.InferenceSession(model.SerializeToString())
    return session.run(None, feeds or {})[0], session


def test_random_normal_statistics_and_seed():
    model = _random_model(helper.make_node("RandomNormal", [], ["y"], shape=[200_000], mean=2.0, scale=3.0, seed=7.0))
    a, session = _run(model)
    b, _ = _run(model, session=session)
    c, _ = _run(model)  # a new session with the same seed draws the same numbers
    assert a.dtype == np.float32 and a.shape == (200_000,)
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    # 200k samples: the mean's standard error is 3/sqrt(2e5) ~ 0.0067
    assert abs(a.mean() - 2.0) < 0.05 and abs(a.std() - 3.0) < 0.05


def test_random_uniform_like_takes_dtype_and_range_from_attributes():
    node = helper.make_node("RandomUniformLike", ["x"], ["y"], low=-1.0, high=3.0, dtype=TensorProto.DOUBLE)
    model = _random_model(node, [_vi("x", F, [1000, 200])], (1000, 200), TensorProto.DOUBLE)
    y, _ = _run(model, {"x": np.zeros((1000, 200), np.float32)})
    assert y.dtype == np.float64 and y.shape == (1000, 200)
    assert y.min() >= -1.0 and y.max() < 3.0 and abs(y.mean() - 1.0) < 0.02


def test_bernoulli_frequency():
    p = np.array([0.1, 0.5, 0.9], dtype=np.float32)
    node = helper.make_node("Bernoulli", ["p"], ["y"], seed=1.0)
    model = _random_model(node, [_vi("p", F, [100_000, 3])], (100_000, 3))
    y, _ = _run(model, {"p": np.broadcast_to(p, (100_000, 3)).copy()})
    assert set(np.unique(y)) <= {0.0, 1.0}
    np.testing.assert_allclose(y.mean(axis=0), p, atol=0.01)


def test_multinomial_frequency():
    logits = np.log(np.array([[0.2, 0.5, 0.3]], dtype=np.float32))
    node = helper.make_node("Multinomial", ["x"], ["y"], sample_size=100_000, seed=3.0)
    model = _random_model(node, [_vi("x", F, [1, 3])], (1, 100_000), TensorProto.INT32)
    y, _ = _run(model, {"x": logits})
    assert y.dtype == np.int32
    freq = np.bincount(y.ravel(), minlength=3) / y.size
    np.testing.assert_allclose(freq, [0.2, 0.5, 0.3], atol=0.01)


def test_dict_vectorizer_takes_a_map_input():
    # a map-typed graph input: onnx-ir has no map type, so core keeps it untyped end to end
    node = helper.make_node("DictVectorizer", ["x"], ["y"], domain=ML, string_vocabulary=["a", "b", "c"])
    map_type = helper.make_map_type_proto(S, helper.make_tensor_type_proto(F, []))
    model = _model(node, [helper.make_value_info("x", map_type)], [_vi("y", F, [None, 3])], ml_opset=1)
    feeds = {"x": {"a": 1.5, "c": -2.0, "zzz": 9.0}}
    _compare(model, feeds)


def _random_regressor(rng, n_trees, depth, n_features, n_targets, aggregate, post):
    """A legacy TreeEnsembleRegressor with complete trees of random splits (node ids shuffled)."""
    modes = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]
    attrs = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_values",
                             "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true",
                             "target_treeids", "target_nodeids", "target_ids", "target_weights")}
    for t in range(n_trees):
        n_nodes = 2 ** (depth + 1) - 1
        ids = rng.permutation(n_nodes) + 10  # node ids need not be positions
        for k in range(n_nodes):
            leaf = k >= 2 ** depth - 1
            attrs["nodes_treeids"].append(t)
            attrs["nodes_nodeids"].append(int(ids[k]))
            attrs["nodes_featureids"].append(int(rng.integers(n_features)))
            attrs["nodes_modes"].append("LEAF" if leaf else modes[int(rng.integers(len(modes)))])
            attrs["nodes_values"].append(float(np.round(rng.standard_normal(), 1)))
            attrs["nodes_truenodeids"].append(0 if leaf else int(ids[2 * k + 1]))
            attrs["nodes_falsenodeids"].append(0 if leaf else int(ids[2 * k + 2]))
            attrs["nodes_missing_value_tracks_true"].append(int(rng.integers(2)))
            if leaf:
                # every leaf votes for every target, as trained models do (where no leaf votes
                # for a target, onnxruntime drops its base value and onnx.reference keeps it)
                for target in rng.permutation(n_targets):
                    attrs["target_treeids"].append(t)
                    attrs["target_nodeids"].append(int(ids[k]))
                    attrs["target_ids"].append(int(target))
                    attrs["target_weights"].append(float(rng.standard_normal()))
    node = helper.make_node("TreeEnsembleRegressor", ["x"], ["y"], domain=ML, n_targets=n_targets,
                            aggregate_function=aggregate, post_transform=post, base_values=[0.5] * n_targets, **attrs)
    return _model(node, [_vi("x", F, [None, n_features])], [_vi("y", F, [None, n_targets])], ml_opset=3)


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC"])
def test_tree_ensemble_regressor_matches_onnxruntime(aggregate, post):
    rng = np.random.default_rng(42)
    model = _random_regressor(rng, n_trees=7, depth=4, n_features=5, n_targets=3, aggregate=aggregate, post=post)
    x = np.round(rng.standard_normal((200, 5)), 1).astype(np.float32)  # ties hit the EQ/NEQ/LEQ edges
    x[rng.random(x.shape) < 0.1] = np.nan
    _compare(model, {"x": x})


def test_string_inputs_may_be_numpy_unicode_or_bytes_arrays():
    model = _model(helper.make_node("StringConcat", ["a", "b"], ["y"]), [_vi("a", S, [2]), _vi("b", S, [2])],
                   [_vi("y", S, [2])])
    session = ort.InferenceSession(model.SerializeToString())
    (y,) = session.run(None, {"a": np.array(["x", "é"]), "b": np.array(["1", "2"], dtype=object)})
    assert y.dtype == object and y.tolist() == ["x1", "é2"]
    (y,) = session.run(None, {"a": np.array(["é".encode(), b"z"]), "b": np.array(["1", "2"])})
    assert y.tolist() == ["é1", "z2"]


@pytest.mark.parametrize("kernel_type", ["LINEAR", "POLY", "RBF", "SIGMOID"])
@pytest.mark.parametrize("one_class", [0, 1])
def test_svm_regressor_matches_onnxruntime(kernel_type, one_class):
    rng = np.random.default_rng(3)
    n_sv, n_features = 6, 4
    node = helper.make_node(
        "SVMRegressor", ["x"], ["y"], domain=ML, kernel_type=kernel_type, kernel_params=[0.3, 0.5, 3.0],
        n_supports=n_sv, support_vectors=rng.standard_normal(n_sv * n_features).tolist(),
        coefficients=rng.standard_normal(n_sv).tolist(), rho=[0.25], one_class=one_class,
    )
    model = _model(node, [_vi("x", F, [None, n_features])], [_vi("y", F, [None, 1])], ml_opset=1)
    _compare(model, {"x": rng.standard_normal((20, n_features)).astype(np.float32)})


def test_svm_regressor_without_support_vectors_is_linear():
    node = helper.make_node("SVMRegressor", ["x"], ["y"], domain=ML, coefficients=[1.0, -2.0, 0.5], rho=[0.1],
                            kernel_type="LINEAR", kernel_params=[0.0, 0.0, 0.0])
    model = _model(node, [_vi("x", F, [None, 3])], [_vi("y", F, [None, 1])], ml_opset=1)
    _compare(model, {"x": np.arange(12, dtype=np.float32).reshape(4, 3)})


def _random_classifier(rng, n_classes, base, post, strings):
    """A TreeEnsembleClassifier on the random trees above, every leaf voting for every class."""
    regressor = _random_regressor(rng, n_trees=6, depth=3, n_features=4, n_targets=1, aggregate="SUM", post="NONE")
    attrs = {a.name: helper.get_attribute_value(a) for a in regressor.graph.node[0].attribute}
    nodes = {k: v for k, v in attrs.items() if k.startswith("nodes_")}
    nodes["nodes_modes"] = [m.decode() for m in nodes["nodes_modes"]]
    votes = {"class_treeids": [], "class_nodeids": [], "class_ids": [], "class_weights": []}
    for t, i, mode in zip(nodes["nodes_treeids"], nodes["nodes_nodeids"], nodes["nodes_modes"]):
        if mode == "LEAF":
            for c in range(n_classes):
                votes["class_treeids"].append(t)
                votes["class_nodeids"].append(i)
                votes["class_ids"].append(c)
                votes["class_weights"].append(float(rng.random() * 2 - 1))
    labels = ({"classlabels_strings": [f"c{k}" for k in range(n_classes)]} if strings
              else {"classlabels_int64s": [3 + 2 * k for k in range(n_classes)]})
    extra = {"base_values": base} if base else {}
    node = helper.make_node("TreeEnsembleClassifier", ["x"], ["label", "scores"], domain=ML, post_transform=post,
                            **nodes, **votes, **labels, **extra)
    return _model(node, [_vi("x", F, [None, 4])],
                  [_vi("label", S if strings else I64, [None]), _vi("scores", F, [None, n_classes])], ml_opset=3)


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"])
@pytest.mark.parametrize("base", [None, [0.1, -0.2, 0.3, 0.0]])
@pytest.mark.parametrize("strings", [False, True])
def test_tree_ensemble_classifier_matches_onnxruntime(post, base, strings):
    rng = np.random.default_rng(7)
    model = _random_classifier(rng, 4, base, post, strings)
    x = np.round(rng.standard_normal((100, 4)), 1).astype(np.float32)
    # onnxruntime's PROBIT uses an approximate erfinv (relative error up to ~2e-3 here); scores
    # outside (0, 1) give NaN in both
    _compare(model, {"x": x}, rtol=5e-3 if post == "PROBIT" else 1e-5)
    (placed,) = ort.InferenceSession(model.SerializeToString()).get_placement().nodes
    assert placed.note == ""  # native


def test_two_class_tree_ensemble_classifier_is_native():
    # onnxruntime's two-class conventions, kernels/trees.py (more cases in tests/test_trees.py)
    rng = np.random.default_rng(1)
    model = _random_classifier(rng, 2, None, "LOGISTIC", False)
    feeds = {"x": np.round(rng.standard_normal((100, 4)), 1).astype(np.float32)}
    session = ort.InferenceSession(model.SerializeToString())
    label, scores = session.run(None, feeds)
    expected_label, expected_scores = onnxruntime.InferenceSession(model.SerializeToString()).run(None, feeds)
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-5, atol=1e-6)
    # onnxruntime answers 1/0 for the labels (3, 5) of this encoding; the class labels are meant
    assert set(expected_label.tolist()) <= {0, 1}
    np.testing.assert_array_equal(label, np.array([3, 5])[expected_label])
    (placed,) = session.get_placement().nodes
    assert placed.note == ""


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("strings", [False, True])
def test_linear_classifier_matches_onnxruntime(post, strings):
    rng = np.random.default_rng(5)
    n_classes, n_features = 4, 3
    labels = ({"classlabels_strings": [f"k{c}" for c in range(n_classes)]} if strings
              else {"classlabels_ints": [10 * c for c in range(n_classes)]})
    node = helper.make_node(
        "LinearClassifier", ["x"], ["label", "scores"], domain=ML, post_transform=post,
        coefficients=rng.standard_normal(n_classes * n_features).tolist(),
        intercepts=rng.standard_normal(n_classes).tolist(), **labels,
    )
    model = _model(node, [_vi("x", F, [None, n_features])],
                   [_vi("label", S if strings else I64, [None]), _vi("scores", F, [None, n_classes])], ml_opset=1)
    _compare(model, {"x": rng.standard_normal((30, n_features)).astype(np.float32)})


def test_linear_classifier_reads_its_coefficients_by_the_input_feature_count():
    # onnxruntime's own example (logreg_iris.onnx, in its wheel) declares 2 features and holds
    # 12 coefficients for 3 classes: onnxruntime uses the first 6 as a 3 x 2 matrix, where the
    # whole list read as 3 x 4 failed in numpy ("shapes not aligned"); too few coefficients for
    # the input's features are a clear error
    rng = np.random.default_rng(6)
    node = helper.make_node("LinearClassifier", ["x"], ["label", "scores"], domain=ML, post_transform="LOGISTIC",
                            coefficients=rng.standard_normal(12).tolist(), intercepts=rng.standard_normal(3).tolist(),
                            classlabels_ints=[0, 1, 2])
    model = _model(node, [_vi("x", F, [None, None])], [_vi("label", I64, [None]), _vi("scores", F, [None, 3])],
                   ml_opset=1)
    for features in (2, 4):
        _compare(model, {"x": rng.standard_normal((5, features)).astype(np.float32)})
    with pytest.raises(ort.Fail, match=r"LinearClassifier.*input has 5 features, 3 classes need 15 coefficients, "
                                       r"the node has 12"):
        ort.InferenceSession(model.SerializeToString()).run(None, {"x": np.ones((1, 5), np.float32)})


def test_array_feature_extractor_refuses_a_negative_index_as_onnxruntime_does():
    # skl2onnx's radius-neighbours models pad with -1; numpy's take counted it from the end
    model = _model(helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain=ML),
                   [_vi("x", F, [None, 3]), _vi("i", I64, [None])], [_vi("y", F, [None, None])])
    feeds = {"x": np.array([[1, 2, 3]], np.float32), "i": np.array([0, -1], np.int64)}
    with pytest.raises(Exception, match="out of range"):
        onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    with pytest.raises(ort.Fail, match=r"ArrayFeatureExtractor.*\[0, -1\] out of range: each must be in \[0, 3\)"):
        ort.InferenceSession(model.SerializeToString()).run(None, feeds)


def test_delegated_two_class_linear_classifier_with_its_label_unread():
    # skl2onnx's OneVsRestClassifier reads only each binary classifier's scores: the delegated
    # kernel returned one value for its two outputs
    node = helper.make_node("LinearClassifier", ["x"], ["label", "proba"], domain=ML, classlabels_ints=[0, 1],
                            coefficients=[1.0, 0, 0, 0, -1.0, 0, 0, 0], intercepts=[-0.5, 0.5], post_transform="LOGISTIC")
    graph = helper.make_graph([node, helper.make_node("Identity", ["proba"], ["p"])], "g", [_vi("x", F, [None, 4])],
                              [_vi("p", F, [None, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)])
    _compare(model, {"x": np.nan_to_num(X)})


# ------------------------------------------------------------------- onnxruntime's contrib text ops

MS = "com.microsoft"
TEXTS = np.array([["Hello, world! a bc", "  x  y  ", ""], ["é café..naïve", "a", "one two three four"]], dtype=object)


def _ms_model(op: str, attrs: dict, inputs: list, out_type) -> bytes:
    node = helper.make_node(op, [name for name, _, _ in inputs], ["y"], domain=MS, **attrs)
    graph = helper.make_graph([node], "g", [_vi(name, elem, shape) for name, elem, shape in inputs],
                              [helper.make_tensor_value_info("y", out_type, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]).SerializeToString()


@pytest.mark.parametrize("attrs", [
    {"mark": 0, "pad_value": "#", "mincharnum": 1, "separators": [" "]},
    {"mark": 1, "pad_value": "#", "mincharnum": 1, "separators": [" ", ",", "!"]},  # one after the other
    {"mark": 1, "pad_value": "#", "mincharnum": 2, "separators": ["[ .,!]+"]},
    {"mark": 0, "pad_value": "", "mincharnum": 1, "tokenexp": "[a-zA-Z0-9_]+"},  # skl2onnx's
    {"mark": 1, "pad_value": "P", "mincharnum": 2, "tokenexp": "\\w+"},  # ASCII \\w, as RE2
    {"mark": 1, "pad_value": "P", "mincharnum": 1, "separators": [""]},  # characters
    {"mark": 0, "pad_value": "P", "mincharnum": 1, "tokenexp": "."},
    {"mark": 0, "pad_value": "P", "mincharnum": 1, "separators": ["a*"]},  # empty matches
    {"mark": 0, "pad_value": "P", "mincharnum": 1, "tokenexp": "a*"},
])
@pytest.mark.parametrize("texts", [TEXTS, TEXTS[0], TEXTS[:, :0], np.array([" ", ","], dtype=object)],
                         ids=["NC", "C", "empty", "only-separators"])
def test_tokenizer_matches_onnxruntime(attrs, texts):
    # skl2onnx's CountVectorizer and TfidfVectorizer models start with it: every one failed
    data = _ms_model("Tokenizer", attrs, [("x", S, list(texts.shape))], S)
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": texts})[0]
    got = ort.InferenceSession(data).run(None, {"x": texts})[0]
    assert got.shape == want.shape and got.tolist() == want.tolist()


def test_tokenizer_names_a_bad_attribute():
    data = _ms_model("Tokenizer", {"mark": 0, "pad_value": "", "mincharnum": 3, "separators": [""]},
                     [("x", S, [2])], S)
    with pytest.raises(Exception, match="mincharnum 3 is too big for character tokenization"):
        ort.InferenceSession(data).run(None, {"x": np.array(["ab", "c"], dtype=object)})


@pytest.mark.parametrize("positive", [0, 1])
@pytest.mark.parametrize("seed", [0, 42])
@pytest.mark.parametrize("elem, values", [
    (S, np.array(["a", "hello", "", "héllo wörld 1234"], dtype=object)),
    (TensorProto.INT32, np.array([0, 1, -5, 123456], np.int32)),
    (I64, np.array([0, 1, -5, 2**40], np.int64)),
    (TensorProto.UINT32, np.array([0, 7], np.uint32)),
    (F, np.array([0.5, -1.0], np.float32)),
    (TensorProto.DOUBLE, np.array([0.5], np.float64)),
], ids=["string", "int32", "int64", "uint32", "float", "double"])
def test_murmur_hash3_matches_onnxruntime(elem, values, seed, positive):
    # skl2onnx's FeatureHasher
    data = _ms_model("MurmurHash3", {"seed": seed, "positive": positive}, [("x", elem, list(values.shape))],
                     TensorProto.UINT32 if positive else TensorProto.INT32)
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": values})[0]
    got = ort.InferenceSession(data).run(None, {"x": values})[0]
    assert got.dtype == want.dtype and got.tolist() == want.tolist()


@pytest.mark.parametrize("metric", ["sqeuclidean", "euclidean"])
@pytest.mark.parametrize("dtype, elem", [(np.float32, F), (np.float64, TensorProto.DOUBLE)])
def test_cdist_matches_onnxruntime(metric, dtype, elem):
    # skl2onnx's nearest-neighbour models with optim="cdist"
    data = _ms_model("CDist", {"metric": metric}, [("a", elem, [None, 4]), ("b", elem, [None, 4])], elem)
    rng = np.random.default_rng(0)
    feeds = {"a": rng.standard_normal((7, 4)).astype(dtype), "b": rng.standard_normal((5, 4)).astype(dtype)}
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = ort.InferenceSession(data).run(None, feeds)[0]
    assert got.dtype == want.dtype and got.shape == (7, 5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("action, want", [
    # onnxruntime 1.32's outputs (towupper/towlower: one character for one, no final sigma)
    ("UPPER", ["AB ", " CD", "STRAßE", "Ǆ", "ﬁ", "İ", "ΟΔΟΣ"]),
    ("LOWER", ["ab ", " cd", "straße", "ǆ", "ﬁ", "i", "οδοσ"]),
])
def test_string_normalizer_maps_case_character_by_character_as_onnxruntime(action, want):
    # Python's full case mapping made "STRASSE", "FI" and "i̇" (found on tf2onnx's string ops)
    model = _model(helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action=action),
                   [_vi("x", S, [None])], [_vi("y", S, [None])])
    x = np.array(["ab ", " Cd", "straße", "ǅ", "ﬁ", "İ", "ΟΔΟΣ" if action == "LOWER" else "οδος"], dtype=object)
    assert ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0].tolist() == want


def test_bytes_objects_in_an_object_array_are_read_as_utf8():
    model = _model(helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action="UPPER"),
                   [_vi("x", S, [None])], [_vi("y", S, [None])])
    x = np.array([b"ab ", "caf\u00e9", "d\u00e9j\u00e0".encode()], dtype=object)
    assert ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0].tolist() == ["AB ", "CAFÉ", "DÉJÀ"]


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer_and_scaler_compiled_rows_are_the_numpy_ones(norm, monkeypatch):
    """float32 rows take the compiled loops (``_jit.normalize_rows``, ``_jit.scale_rows``):
    the numpy path's values on zero rows, NaN, negatives, a 1-D input, one-value offsets; the
    numpy path itself is checked against onnxruntime by ``test_matches_onnxruntime``."""
    pytest.importorskip("numba", reason="numba (optional) is not installed")
    from ort_ep_cpu.kernels import _jit

    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    x[1] = 0
    x[2, 3] = np.nan
    x[3] = -np.abs(x[3])
    models = [_model(helper.make_node("Normalizer", ["x"], ["y"], domain=ML, norm=norm),
                     [_vi("x", F, [None, 5])], [_vi("y", F, [None, 5])]),
              _model(helper.make_node("Scaler", ["x"], ["y"], domain=ML, offset=[0.5], scale=[2.0, 1.0, 0.5, -1.0, 3.0]),
                     [_vi("x", F, [None, 5])], [_vi("y", F, [None, 5])])]
    for model in models:
        data = model.SerializeToString()
        for feed in (x, x[4:5]):
            seen: list[int] = []
            for name in ("normalize_rows", "scale_rows"):
                real = getattr(_jit, name)
                monkeypatch.setattr(_jit, name, lambda real=real, seen=seen: seen.append(1) or real())
            got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": feed})[0]
            assert seen
            monkeypatch.setattr(_jit, "USE", False)
            with np.errstate(invalid="ignore"):
                want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": feed})[0]
            monkeypatch.undo()
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
