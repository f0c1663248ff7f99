"""Tree ensembles (``kernels/trees.py``) against onnxruntime, on scikit-learn models converted by
skl2onnx and on hand-made two-class encodings, through the compiled loop and the numpy walk.

Tolerances: scores rtol 1e-5, atol 1e-5 (this provider sums in float64, onnxruntime in float32);
labels exact.
"""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import ort_core as ort
from ort_ep_cpu.kernels import _jit, trees

sklearn = pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")

from skl2onnx import to_onnx  # noqa: E402
from sklearn import ensemble  # noqa: E402

ML = "ai.onnx.ml"
RTOL = ATOL = 1e-5


@pytest.fixture(params=["compiled", "numpy"])
def path(request, monkeypatch):
    if request.param == "compiled":
        if trees._compiled() is None:
            pytest.skip("numba is not installed")
    else:
        monkeypatch.setattr(_jit, "USE", False)
    return request.param


def _compare(data: bytes, feeds: dict, expect_native: bool = True) -> None:
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    expected = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = session.run(None, feeds)
    for name, a, b in zip([o.name for o in session.get_outputs()], got, expected):
        if isinstance(b, list):  # ZipMap's list of dicts
            assert len(a) == len(b)
            for ra, rb in zip(a, b):
                assert ra.keys() == rb.keys()
                np.testing.assert_allclose(list(ra.values()), list(rb.values()), rtol=RTOL, atol=ATOL, err_msg=name)
        elif np.asarray(b).dtype.kind in "OU":
            assert np.asarray(a).tolist() == np.asarray(b).tolist(), name
        else:
            np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, err_msg=name)
            assert np.asarray(a).dtype == np.asarray(b).dtype, name
    notes = {p.op_type: p.note for p in session.get_placement().nodes if p.op_type.startswith("TreeEnsemble")}
    assert notes, "no tree ensemble in the model"
    if expect_native:
        assert set(notes.values()) == {""}, notes


def _data(n_classes: int | None, n: int = 300, n_features: int = 6):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, n_features)).astype(np.float32)
    if n_classes is None:
        return x, x[:, 0] * 2 + np.sin(x[:, 1]) + 0.1 * rng.standard_normal(n)
    return x, (np.digitize(x[:, 0] + 0.5 * x[:, 1], np.linspace(-1, 1, n_classes - 1))).astype(np.int64)


CLASSIFIERS = {
    "random_forest": lambda: ensemble.RandomForestClassifier(n_estimators=12, max_depth=6, random_state=0),
    "extra_trees": lambda: ensemble.ExtraTreesClassifier(n_estimators=8, max_depth=5, random_state=0),
    "gradient_boosting": lambda: ensemble.GradientBoostingClassifier(n_estimators=15, max_depth=3, random_state=0),
    "hist_gradient_boosting": lambda: ensemble.HistGradientBoostingClassifier(max_iter=15, random_state=0),
}
REGRESSORS = {
    "random_forest": lambda: ensemble.RandomForestRegressor(n_estimators=12, max_depth=6, random_state=0),
    "gradient_boosting": lambda: ensemble.GradientBoostingRegressor(n_estimators=20, max_depth=3, random_state=0),
    "hist_gradient_boosting": lambda: ensemble.HistGradientBoostingRegressor(max_iter=20, random_state=0),
}


@pytest.fixture(autouse=True)
def _int_missing_tracks(monkeypatch):
    # skl2onnx 1.20 passes a Python bool as nodes_missing_value_tracks_true for the leaves of
    # histogram gradient boosting, which protobuf 7 refuses in an ints attribute: give it an int
    from skl2onnx.common import tree_ensemble

    add_node = tree_ensemble.add_node

    def add_int_node(*args, nodes_missing_value_tracks_true=0, **kwargs):
        return add_node(*args, nodes_missing_value_tracks_true=int(nodes_missing_value_tracks_true), **kwargs)

    monkeypatch.setattr(tree_ensemble, "add_node", add_int_node)


def _convert(model, x, **kwargs):
    return to_onnx(model, x[:1], **kwargs)


_FITTED: dict = {}


def _fitted(table: dict, name: str, classes: int | None):
    """The estimator fitted once per module (both paths test the same model)."""
    key = (id(table), name, classes)
    if key not in _FITTED:
        x, y = _data(classes)
        _FITTED[key] = table[name]().fit(x, y)
    return _FITTED[key]


@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_sklearn_classifiers_match_onnxruntime(name, n_classes, path):
    x, _ = _data(n_classes)
    model = _fitted(CLASSIFIERS, name, n_classes)
    onx = _convert(model, x, options={id(model): {"zipmap": False}}, target_opset={"": 17, ML: 3})
    _compare(onx.SerializeToString(), {"X": x[:64]})


def test_sklearn_classifier_with_string_labels_and_zipmap(path):
    x, y = _data(2)
    model = ensemble.RandomForestClassifier(n_estimators=5, max_depth=4, random_state=0).fit(x, np.array(["no", "yes"])[y])
    onx = _convert(model, x, target_opset={"": 17, ML: 3})
    _compare(onx.SerializeToString(), {"X": x[:20]})


@pytest.mark.parametrize("name", sorted(REGRESSORS))
def test_sklearn_regressors_match_onnxruntime(name, path):
    x, _ = _data(None)
    model = _fitted(REGRESSORS, name, None)
    onx = _convert(model, x, target_opset={"": 17, ML: 3})
    _compare(onx.SerializeToString(), {"X": x[:64]})
    _compare(onx.SerializeToString(), {"X": x[:1]})


def _as_tree_ensemble(legacy_model):
    """The legacy TreeEnsembleRegressor of a one-target model re-encoded as ai.onnx.ml 5's
    TreeEnsemble (which has no base values: those are dropped)."""
    (node,) = [n for n in legacy_model.graph.node if n.op_type == "TreeEnsembleRegressor"]
    a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
    modes = [m.decode() for m in a["nodes_modes"]]
    key = list(zip(a["nodes_treeids"], a["nodes_nodeids"]))
    inner = [k for k, m in zip(key, modes) if m != "LEAF"]
    leaves = [k for k, m in zip(key, modes) if m == "LEAF"]
    at_inner, at_leaf = {k: i for i, k in enumerate(inner)}, {k: i for i, k in enumerate(leaves)}
    vote = {(t, n): w for t, n, w in zip(a["target_treeids"], a["target_nodeids"], a["target_weights"])}
    codes = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4, "BRANCH_NEQ": 5}
    row = {k: j for j, k in enumerate(key)}
    attrs = {k: [] for k in ("nodes_featureids", "nodes_truenodeids", "nodes_trueleafs", "nodes_falsenodeids",
                             "nodes_falseleafs")}
    splits, node_modes = [], []
    for t, n in inner:
        j = row[(t, n)]
        attrs["nodes_featureids"].append(a["nodes_featureids"][j])
        splits.append(a["nodes_values"][j])
        node_modes.append(codes[modes[j]])
        for side in ("true", "false"):
            child = (t, a[f"nodes_{side}nodeids"][j])
            is_leaf = child in at_leaf
            attrs[f"nodes_{side}nodeids"].append(at_leaf[child] if is_leaf else at_inner[child])
            attrs[f"nodes_{side}leafs"].append(int(is_leaf))
    children = {(t, a[f"nodes_{s}nodeids"][row[(t, n)]]) for t, n in inner for s in ("true", "false")}
    roots = [at_inner[k] for k in inner if k not in children]
    new = helper.make_node(
        "TreeEnsemble", list(node.input), list(node.output), domain=ML, **attrs, tree_roots=roots,
        nodes_splits=helper.make_tensor("s", TensorProto.FLOAT, [len(splits)], splits),
        nodes_modes=helper.make_tensor("m", TensorProto.UINT8, [len(node_modes)], node_modes),
        leaf_targetids=[0] * len(leaves),
        leaf_weights=helper.make_tensor("w", TensorProto.FLOAT, [len(leaves)], [vote[k] for k in leaves]),
        n_targets=1, aggregate_function=1, post_transform=0)
    graph = helper.make_graph([new], "g", list(legacy_model.graph.input), list(legacy_model.graph.output))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(ML, 5)])


@pytest.mark.parametrize("name", ["random_forest", "gradient_boosting", "hist_gradient_boosting"])
def test_sklearn_regressor_as_the_newer_tree_ensemble(name, path):
    x, _ = _data(None)
    model = _fitted(REGRESSORS, name, None)
    onx = _as_tree_ensemble(_convert(model, x, target_opset={"": 17, ML: 3}))
    _compare(onx.SerializeToString(), {"X": x[:64]})


# ----------------------------------------------------------------------- many-class finishing


def _many_class(base, labels, post="NONE") -> bytes:
    """Three stumps and four classes; the leaves vote for classes 0 and 2 only (1 and 3 are
    voted by base values or by no one), with weights of both signs."""
    return _stumps(lambda rng: [(c, float(2 * rng.random() - 1)) for c in (0, 2)], base, post, labels,
                   np.random.default_rng(11))


@pytest.mark.parametrize("labels", [(0, 1, 2, 3), (40, 10, 30, 20)])
@pytest.mark.parametrize("base", [[], [0.05, 0.6, -0.3, -2.0], [0.1, -0.2, 0.3, 0.9]])
def test_many_class_finish_matches_onnxruntime_on_both_paths(base, labels, path):
    """The compiled finish (no post transform) and the numpy one: base values on the first
    classes, classes no tree votes for, labels that are not the class index; one row and 300."""
    data = _many_class(base, labels)
    x = np.random.default_rng(5).standard_normal((300, 3)).astype(np.float32)
    _compare(data, {"x": x})
    _compare(data, {"x": x[7:8]})


@pytest.mark.parametrize("finish", ["many_class", "regression", "two_class"])
def test_the_finish_is_a_compiled_loop_without_a_post_transform(finish, monkeypatch):
    """The many-class classifier's and the regressions' compiled finishes run where there is no
    post transform, and numpy's rules where there is one; the two-class finish has every post
    transform but PROBIT compiled."""
    if trees._compiled(finish) is None:
        pytest.skip("numba is not installed")
    if finish == "many_class":
        plain, transformed = _many_class([], range(4)), _many_class([], range(4), post="SOFTMAX")
    elif finish == "two_class":
        plain, transformed = _two_class([1], [1.0], [], "LOGISTIC"), None
    else:
        plain = _regressor_stumps([0.5, -1.25, 3.0], "AVERAGE", "NONE")
        transformed = _regressor_stumps([0.5, -1.25, 3.0], "AVERAGE", "LOGISTIC")
    calls = []
    real = trees._compiled
    monkeypatch.setattr(trees, "_compiled", lambda which="forest": calls.append(which) or real(which))
    x = np.random.default_rng(6).standard_normal((5, 3)).astype(np.float32)
    _compare(plain, {"x": x})
    # the walk and the finish are one compiled call where the preorder layout holds the forest
    # (``FlatForest.summed_regression``, ``summed_classification``)
    compiled = f"preorder_{finish}"
    assert compiled in calls
    calls.clear()
    if transformed is None:
        return
    _compare(transformed, {"x": x})
    assert finish not in calls and compiled not in calls


# --------------------------------------------------------------------------- regression finishing


def _regressor_stumps(base, aggregate: str, post: str) -> bytes:
    """A TreeEnsembleRegressor of three stumps (``_stump_attributes``) and three targets;
    leaves vote for targets 0 and 2 only (target 1 gets its base value, or 0)."""
    attrs = _stump_attributes(lambda rng: [(target, float(4 * rng.random() - 2)) for target in (0, 2)],
                              np.random.default_rng(13), "target")
    extra = {"base_values": base} if base else {}
    node = helper.make_node("TreeEnsembleRegressor", ["x"], ["y"], domain=ML, n_targets=3, post_transform=post,
                            aggregate_function=aggregate, **attrs, **extra)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)])
    return model.SerializeToString()


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC"])
@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("base", [[], [0.5, -1.25, 3.0]])
def test_regression_finish_matches_onnxruntime_on_both_paths(base, aggregate, post, path):
    """The compiled finish (no post transform: average, then base values, as float32) and the
    numpy one, with three targets, one of which no leaf votes for: onnxruntime gives it 0, base
    value or not (onnx.reference gives the base value, or MIN/MAX's extreme); one row and 300."""
    data = _regressor_stumps(base, aggregate, post)
    x = np.random.default_rng(8).standard_normal((300, 3)).astype(np.float32)
    _compare(data, {"x": x})
    _compare(data, {"x": x[4:5]})


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_a_one_target_regressor_reads_each_leaf_s_first_vote_as_onnxruntime(aggregate, path):
    """skl2onnx's decision_leaf output lists each leaf once per class, all for target 0:
    onnxruntime reads only a leaf's first vote where there is one target (summed, the leaf ids
    came out times the class count)."""
    attrs = _stump_attributes(lambda rng: [(0, float(rng.integers(1, 9))), (0, 5.0), (0, -2.0)],
                              np.random.default_rng(3), "target")
    node = helper.make_node("TreeEnsembleRegressor", ["x"], ["y"], domain=ML, n_targets=1,
                            aggregate_function=aggregate, **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 1])])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)])
    x = np.random.default_rng(9).standard_normal((50, 3)).astype(np.float32)
    _compare(data.SerializeToString(), {"x": x})


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3], ids=["AVERAGE", "SUM", "MIN", "MAX"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tree_ensemble_targets_no_leaf_votes_for_are_zero_as_in_onnxruntime(aggregate, dtype, path):
    """TreeEnsemble (ai.onnx.ml 5), two stumps whose leaves vote for targets 0 and 2 of three:
    where a row's leaves miss a target, it is 0 (before: MIN/MAX's float64 extremes, inf in
    float32)."""
    element = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    node = helper.make_node(
        "TreeEnsemble", ["x"], ["y"], domain=ML, nodes_featureids=[0, 1],
        nodes_splits=helper.make_tensor("s", element, [2], [0.0, 0.1]),
        nodes_modes=helper.make_tensor("m", TensorProto.UINT8, [2], [0, 0]),
        nodes_truenodeids=[0, 2], nodes_trueleafs=[1, 1], nodes_falsenodeids=[1, 3], nodes_falseleafs=[1, 1],
        tree_roots=[0, 1], leaf_targetids=[0, 2, 0, 2],
        leaf_weights=helper.make_tensor("w", element, [4], [1.0, 2.0, 3.0, -4.0]),
        n_targets=3, aggregate_function=aggregate, post_transform=0)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", element, [None, 3])],
                              [helper.make_tensor_value_info("y", element, [None, 3])])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(ML, 5)])
    x = np.random.default_rng(2).standard_normal((40, 3)).astype(dtype)
    _compare(data.SerializeToString(), {"x": x})


# ------------------------------------------------------------------------- two-class encodings


def _stump_attributes(leaf_votes, rng, prefix: str) -> dict[str, list]:
    """The legacy tree attributes of three stumps over features 0/1/2 whose every leaf votes
    ``leaf_votes(rng)`` ((class or target id, weight) pairs); ``prefix``: "class" or "target"."""
    vote_keys = tuple(f"{prefix}_{k}" for k in ("treeids", "nodeids", "ids", "weights"))
    attrs = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_values",
                             "nodes_truenodeids", "nodes_falsenodeids", *vote_keys)}
    for t in range(3):
        for k, (mode, true, false) in enumerate((("BRANCH_LEQ", 1, 2), ("LEAF", 0, 0), ("LEAF", 0, 0))):
            for key, value in (("nodes_treeids", t), ("nodes_nodeids", k), ("nodes_featureids", t),
                               ("nodes_modes", mode), ("nodes_values", 0.1 * t), ("nodes_truenodeids", true),
                               ("nodes_falsenodeids", false)):
                attrs[key].append(value)
            if mode == "LEAF":
                for c, w in leaf_votes(rng):
                    for key, value in zip(vote_keys, (t, k, c, w)):
                        attrs[key].append(value)
    return attrs


def _stumps(leaf_votes, base, post, labels, rng) -> bytes:
    """A TreeEnsembleClassifier of three stumps (``_stump_attributes``) with classes ``labels``."""
    attrs = _stump_attributes(leaf_votes, rng, "class")
    extra = {"base_values": base} if base else {}
    node = helper.make_node("TreeEnsembleClassifier", ["x"], ["label", "scores"], domain=ML, post_transform=post,
                            classlabels_int64s=list(labels), **attrs, **extra)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, len(labels)])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)])
    return model.SerializeToString()


def _two_class(class_ids, weights, base, post, labels=(0, 1), mixed=False):
    """Three stumps; each leaf votes ``weights`` (one per class id) times a uniform draw from
    (0, 1), or from (-1, 1) where ``mixed``."""
    def votes(rng):
        return [(c, float(w * (2 * rng.random() - 1 if mixed else rng.random()))) for c, w in zip(class_ids, weights)]
    return _stumps(votes, base, post, labels, np.random.default_rng(len(class_ids)))


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("base", [[], [0.3], [0.2, -0.4]])
@pytest.mark.parametrize("votes", [
    ([1], [1.0], False),  # binary, probabilities of class 1
    ([0], [1.0], False),  # binary, probabilities of class 0
    ([0], [2.0], True),  # binary, margins of both signs for class 0
    ([1], [1.5], True),  # binary, margins of both signs for class 1
    ([1], [-1.5], False),  # binary, negative margins
    ([0, 1], [0.7, 0.3], False),  # both classes voted
])
def test_two_class_encodings_match_onnxruntime(votes, base, post, path):
    class_ids, weights, mixed = votes
    if len(base) == 1 and len(class_ids) == 2:
        pytest.skip("one base value without a binary encoding runs on onnx.reference (next test)")
    data = _two_class(class_ids, weights, base, post, mixed=mixed)
    x = np.random.default_rng(3).standard_normal((50, 3)).astype(np.float32)
    _compare(data, {"x": x})


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("base", [[], [0.2, -0.4]])
@pytest.mark.parametrize("votes", [([1], [1.0], False), ([0], [2.0], True), ([0, 1], [0.7, 0.3], False)])
def test_two_class_compiled_finaliser_equals_the_numpy_rules(votes, base, post, monkeypatch):
    """The compiled two-class finaliser gives the numpy rules' outputs exactly (labels and
    float32 scores), on float32 and float64 inputs, NaN features included."""
    if trees._compiled("two_class") is None:
        pytest.skip("numba is not installed")
    class_ids, weights, mixed = votes
    data = _two_class(class_ids, weights, base, post, mixed=mixed)
    x = np.random.default_rng(5).standard_normal((400, 3)).astype(np.float32)
    x[::7, 1] = np.nan
    compiled = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    got = compiled.run(None, {"x": x})
    one_row = compiled.run(None, {"x": x[3:4]})
    monkeypatch.setattr(_jit, "USE", False)
    numpy_rules = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    expected = numpy_rules.run(None, {"x": x})
    for a, b in zip(got, expected):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    for a, b in zip(one_row, expected):
        np.testing.assert_array_equal(a, b[3:4])

def test_two_class_configurations_onnxruntime_leaves_open_run_on_the_reference():
    data = _two_class([0, 1], [0.7, 0.3], [0.3], "NONE")
    (placed,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).get_placement().nodes
    assert placed.note == "delegated to onnx.reference"
    data = _two_class([1], [1.0], [], "PROBIT")
    (placed,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).get_placement().nodes
    assert placed.note == "delegated to onnx.reference"


def test_a_node_reading_a_missing_feature_is_an_error_naming_it(path):
    import onnx

    model = onnx.load_from_string(_two_class([1], [1.0], [], "NONE"))
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "features"  # any width passes the session
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(ort.OrtError, match="TreeEnsembleClassifier.*a node reads feature 2, but the input has 2"):
        session.run(None, {"x": np.zeros((2, 2), np.float32)})


@pytest.mark.parametrize("shift", [0, -10], ids=["packed_ids", "negative_ids"])
@pytest.mark.parametrize("attribute,at", [("nodes_truenodeids", 0), ("class_nodeids", 2)])
def test_a_reference_to_a_missing_node_is_an_error_naming_it(attribute, at, shift):
    """Both lookups (ids packed and binary-searched; negative ids through the dict) refuse a
    node id no node has, naming the attribute, the node and its tree. With every id shifted
    negative (onnxruntime refuses that: it wants ids below the node count) the answers stay."""
    import onnx

    data = _two_class([1], [1.0], [], "NONE")
    model = onnx.load_from_string(data)
    node = model.graph.node[0]
    for a in node.attribute:
        if a.name in ("nodes_nodeids", "nodes_truenodeids", "nodes_falsenodeids", "class_nodeids"):
            a.ints[:] = [i + shift for i in a.ints]
    x = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    (bad,) = [a for a in node.attribute if a.name == attribute]
    bad.ints[at] = 77
    with pytest.raises(ort.OrtError, match=rf"{attribute} refers to node 77 of tree \d, which does not exist"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _random_forest(rng, compare: int, n_trees: int = 7, n_features: int = 5, n_out: int = 3) -> trees.FlatForest:
    """A FlatForest of random trees (depth up to 6) whose inner nodes all make ``compare``, with
    its nodes numbered in a shuffled order (so the preorder layout moves them), random
    missing-goes-true flags and 1-2 votes per leaf."""
    mode, feature, split, true_next, false_next, missing, votes = [], [], [], [], [], [], []

    def grow(depth):
        k = len(mode)
        for column in (mode, feature, split, true_next, false_next, missing):
            column.append(0)
        votes.append([])
        if depth == 6 or (depth > 1 and rng.random() < 0.3):
            mode[k], true_next[k], false_next[k] = trees.LEAF, k, k
            votes[k] = [(int(rng.integers(n_out)), float(rng.standard_normal())) for _ in range(int(rng.integers(1, 3)))]
            return k
        mode[k], feature[k], split[k] = compare, int(rng.integers(n_features)), float(rng.standard_normal())
        missing[k] = bool(rng.random() < 0.5)
        true_next[k], false_next[k] = grow(depth + 1), grow(depth + 1)
        return k

    roots = [grow(0) for _ in range(n_trees)]
    n = len(mode)
    new = rng.permutation(n)  # node k is numbered new[k]
    inverse = np.argsort(new)
    def renumbered(column):
        return np.asarray(column)[inverse]
    vote_lists = [votes[k] for k in inverse]
    counts = [len(v) for v in vote_lists]
    return trees.FlatForest(
        roots=new[np.asarray(roots)], mode=renumbered(mode).astype(np.int64), feature=renumbered(feature).astype(np.int64),
        split=renumbered(split).astype(np.float64), true_next=new[renumbered(true_next)], false_next=new[renumbered(false_next)],
        missing_true=renumbered(missing).astype(bool), member_start=np.zeros(n + 1, np.int64), member_values=np.zeros(0),
        vote_start=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        vote_id=np.array([c for v in vote_lists for c, _ in v], np.int64),
        vote_weight=np.array([w for v in vote_lists for _, w in v], np.float64),
    )


@pytest.mark.parametrize("compare", [0, 1, 2, 3], ids=["LEQ", "LT", "GTE", "GT"])
def test_the_preorder_walk_equals_the_node_table_walk(compare, monkeypatch):
    """Bit-equal sums and the same voted cells, four rows a walk and the rows left over, NaN
    features both ways, against the general compiled loop and the numpy walk."""
    if trees._compiled() is None:
        pytest.skip("numba is not installed")
    rng = np.random.default_rng(compare)
    forest = _random_forest(rng, compare)
    assert forest.preorder() is not None and forest.preorder().compare == compare
    x = rng.standard_normal((11, 5))
    x[rng.random(x.shape) < 0.15] = np.nan
    for rows in (1, 4, 7, 11):
        got = forest.aggregate(x[:rows], trees.SUM, 3)
        general = trees.FlatForest(**{f: getattr(forest, f) for f in forest.__dataclass_fields__})
        general._preorder.append(None)  # its preorder layout "does not apply": the node-table loop
        want = general.aggregate(x[:rows], trees.SUM, 3)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        with monkeypatch.context() as m:
            m.setattr(_jit, "USE", False)
            walked = general.aggregate(x[:rows], trees.SUM, 3)
        np.testing.assert_allclose(got[0], walked[0], rtol=1e-12)
        np.testing.assert_array_equal(got[1], walked[1])


def test_forests_the_preorder_layout_cannot_hold_take_the_node_table_loop():
    if trees._compiled() is None:
        pytest.skip("numba is not installed")
    rng = np.random.default_rng(5)
    mixed = _random_forest(rng, 0)
    mode = mixed.mode.copy()
    mode[np.flatnonzero(mode == 0)[0]] = 1  # one BRANCH_LT among the LEQs
    assert trees.FlatForest(**{**{f: getattr(mixed, f) for f in mixed.__dataclass_fields__}, "mode": mode}).preorder() is None
    shared = _random_forest(rng, 0, n_trees=2)
    roots = np.array([shared.roots[0], shared.roots[0]])  # two trees share every node
    twice = trees.FlatForest(**{**{f: getattr(shared, f) for f in shared.__dataclass_fields__}, "roots": roots})
    assert twice.preorder() is None
    x = rng.standard_normal((6, 5))
    once = trees.FlatForest(**{**{f: getattr(shared, f) for f in shared.__dataclass_fields__}, "roots": roots[:1]})
    np.testing.assert_allclose(twice.aggregate(x, trees.SUM, 3)[0], 2 * once.aggregate(x, trees.SUM, 3)[0], rtol=1e-12)


@pytest.mark.parametrize("layout", ["preorder", "node table"])
def test_a_walk_split_over_threads_equals_the_one_thread_walk(layout, monkeypatch):
    """Where one thread takes long enough, later walks of that row count are split by rows over
    the session's threads: the same sums and voted cells, bit for bit."""
    if trees._compiled() is None:
        pytest.skip("numba is not installed")
    rng = np.random.default_rng(9)
    forest = _random_forest(rng, 1, n_trees=40)
    if layout == "node table":
        forest._preorder.append(None)
    x = rng.standard_normal((37, 5))
    x[rng.random(x.shape) < 0.1] = np.nan
    monkeypatch.setattr(trees, "SPLIT_MIN_SECONDS", 0.0)
    for _ in range(3):  # 37 rows x 40 trees: too little work to be timed, however slow
        want = forest.aggregate(x, trees.SUM, 3)
    assert forest._split == {}
    monkeypatch.setattr(trees, "SPLIT_MIN_WALKS", 0)
    monkeypatch.setattr(trees, "SPLIT_MIN_SECONDS", 1.0)
    forest.aggregate(x, trees.SUM, 3)  # the first walk of 37 rows: not timed
    forest.aggregate(x, trees.SUM, 3)  # the second: quick, so not split
    assert forest._split == {37: False}
    parts: list[tuple[int, int]] = []
    real = trees._over_rows

    def spy(walk, rows, split):
        def recorded(lo, hi):
            parts.append((lo, hi))
            walk(lo, hi)
        real(recorded, rows, split)

    monkeypatch.setattr(trees, "_over_rows", spy)
    monkeypatch.setattr(trees.threads, "usable", lambda: 3)
    monkeypatch.setattr(trees, "SPLIT_MIN_SECONDS", 0.0)
    forest._split.clear()
    results = [forest.aggregate(x, trees.SUM, 3) for _ in range(3)]  # untimed, timed (over 0 s), split
    assert forest._split == {37: True}
    assert sorted(parts) == [(0, 12), (0, 37), (0, 37), (12, 24), (24, 37)]  # the last in three parts
    for result in results:
        np.testing.assert_array_equal(result[0], want[0])
        np.testing.assert_array_equal(result[1], want[1])


def _split_walk_sums(forest: trees.FlatForest, x: np.ndarray) -> np.ndarray:
    return forest.aggregate(x, trees.SUM, 3)[0]


def test_a_split_walk_runs_in_a_forked_child(monkeypatch):
    """A child forked after the walk's workers started makes its own: the parent's do not
    exist there, and a pool waiting for them hung the child."""
    if trees._compiled() is None:
        pytest.skip("numba is not installed")
    from parallel_runs import in_forked_child

    rng = np.random.default_rng(4)
    forest = _random_forest(rng, 0, n_trees=20)
    x = rng.standard_normal((24, 5))
    monkeypatch.setattr(trees.threads, "usable", lambda: 2)
    monkeypatch.setattr(trees, "SPLIT_MIN_SECONDS", 0.0)
    monkeypatch.setattr(trees, "SPLIT_MIN_WALKS", 0)
    for _ in range(3):
        want = forest.aggregate(x, trees.SUM, 3)[0]
    assert forest._split == {24: True} and trees._pool is not None
    np.testing.assert_array_equal(in_forked_child(_split_walk_sums, forest, x, timeout=30), want)


def test_a_share_whose_worker_has_not_started_is_walked_by_the_caller(monkeypatch):
    """A split walk does not wait on a worker the scheduler has not run (a busy core): the
    calling thread walks the shares no worker started, as onnxruntime's caller does."""
    import threading

    monkeypatch.setattr(trees.threads, "usable", lambda: 2)
    release = threading.Event()
    trees._over_rows(lambda lo, hi: None, 8, {8: True})  # the pool made
    busy = trees._pool.submit(release.wait, 5)  # its one worker held
    walked: list[tuple[int, tuple[int, int]]] = []
    try:
        trees._over_rows(lambda lo, hi: walked.append((threading.get_ident(), (lo, hi))), 8, {8: True})
    finally:
        release.set()
        busy.result()
    assert walked == [(threading.get_ident(), (0, 4)), (threading.get_ident(), (4, 8))]


def test_a_large_forest_reaches_the_checker_and_inference_without_its_node_lists(monkeypatch):
    """A forest's node lists (over LONG_LIST values, nodes_modes's strings among them) leave
    the model before the ONNX checker and shape inference, which copy the model into C++ and
    back (a 194 MB LightGBM forest: 6.4 s of its 16 s creation), and come back for the
    kernel: the results are onnxruntime's, and a ModelProto given is left as it was."""
    import onnx

    from ort_core.graph import load

    x, y = _data(3, n=2000)
    model = ensemble.RandomForestClassifier(n_estimators=30, max_depth=8, random_state=0).fit(x, y)
    proto = _convert(model, x, options={id(model): {"zipmap": False}}, target_opset={"": 17, ML: 3})
    forest = next(n for n in proto.graph.node if n.op_type == "TreeEnsembleClassifier")
    assert len(next(a for a in forest.attribute if a.name == "nodes_modes").strings) > load.LONG_LIST
    longest: list[int] = []
    real_check = onnx.checker.check_model

    def check(model, *args, **kwargs):
        m = model if isinstance(model, onnx.ModelProto) else onnx.load_from_string(model)
        node = next(n for n in m.graph.node if n.op_type == "TreeEnsembleClassifier")
        longest.append(max(len(a.ints) + len(a.floats) + len(a.strings) for a in node.attribute))
        return real_check(model, *args, **kwargs)

    monkeypatch.setattr(onnx.checker, "check_model", check)
    before = proto.SerializeToString()
    session = ort.InferenceSession(proto, providers=["CPUExecutionProvider"])
    assert longest and max(longest) <= load.LONG_LIST
    assert proto.SerializeToString() == before
    got = session.run(None, {"X": x[:64]})
    want = onnxruntime.InferenceSession(before, providers=["CPUExecutionProvider"]).run(None, {"X": x[:64]})
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=RTOL, atol=ATOL)
