"""ai.onnx.ml: classic machine-learning ops (scikit-learn style pipelines).

Native kernels are vectorised over the batch. The tree ensembles' kernels are in ``trees.py``
(here: the legacy encoding's reader, ``_LegacyForest``, and the numpy walk, ``_walk``, every
sample through every tree at once, one tree level per step). Legacy ops that are rarely met in
current models are delegated to onnx.reference (see ``_delegate.py``).
"""

from __future__ import annotations

import math

import numpy as np

from ort_core import Kernel

from ..registry import kernel
from . import _jit
from ._ort_math import logistic, probit
from ._util import as_rows

ML = "ai.onnx.ml"


def _strings_in(x) -> bool:
    return np.asarray(x).dtype.kind in ("O", "U", "S")


# ------------------------------------------------------------------------------ post transforms


def _softmax(s: np.ndarray) -> np.ndarray:
    # the ufuncs' reduce methods, not ndarray.max/sum (the same reductions behind a Python
    # wrapper, ~1 us each on a one-row model); in place after the first pass
    e = np.subtract(s, np.maximum.reduce(s, axis=-1, keepdims=True))
    if e.dtype.kind != "f":  # integer scores: exp makes float64 of them, as before
        e = np.exp(e)
        return e / np.add.reduce(e, axis=-1, keepdims=True)
    np.exp(e, out=e)
    e /= np.add.reduce(e, axis=-1, keepdims=True)
    return e


def _softmax_zero(s: np.ndarray) -> np.ndarray:
    # like softmax, but entries that are exactly 0 stay 0
    e = np.where(s == 0, 0, np.exp(s - s.max(axis=-1, keepdims=True)))
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total != 0)


_POST = {
    "NONE": lambda s: s,
    "SOFTMAX": _softmax,
    "LOGISTIC": lambda s: 1.0 / (1.0 + np.exp(-s)),
    "SOFTMAX_ZERO": _softmax_zero,
    "PROBIT": probit,  # onnxruntime's approximate sqrt(2) * erfinv(2p - 1), not the exact ndtri
}
_POST_CODES = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


def _post_name(name_or_code) -> str:
    """A post_transform attribute by name (an older exporter wrote its index)."""
    return _POST_CODES[int(name_or_code)] if isinstance(name_or_code, (int, np.integer)) else name_or_code


def _post_transform(name_or_code, node):
    name = _post_name(name_or_code)
    if name not in _POST:
        raise ValueError(f"{node.op_type} {node.name!r}: post_transform {name!r} not one of {', '.join(_POST)}")
    return _POST[name]


# ------------------------------------------------------------------------------ LabelEncoder


def _label_defaults(values) -> object:
    if values.dtype.kind in ("O", "U", "S"):
        return "_Unused"
    if values.dtype.kind == "f":
        return -0.0
    return -1


@kernel("LabelEncoder", since=1, domain=ML)
def _label_encoder_v1(node, request):
    classes = list(node.attr("classes_strings") or [])
    if _strings_in_type(request, node.inputs[0]):
        table = {c: i for i, c in enumerate(classes)}
        default = int(node.attr("default_int64", -1))
        return lambda x: np.array(
            [table.get(s, default) for s in np.asarray(x).reshape(-1).tolist()], dtype=np.int64
        ).reshape(np.shape(x))
    default_s = node.attr("default_string", "_Unused")

    def to_string(x):
        idx = np.asarray(x).reshape(-1)
        out = np.array([classes[i] if 0 <= i < len(classes) else default_s for i in idx.tolist()], dtype=object)
        return out.reshape(np.shape(x))

    return to_string


def _strings_in_type(request, name: str) -> bool:
    return request.value(name).type == "tensor(string)"


@kernel("LabelEncoder", since=2, domain=ML)
def _label_encoder(node, request):
    a = node.attributes
    keys = next((np.asarray(a[k]) for k in ("keys_tensor", "keys_strings", "keys_int64s", "keys_floats") if k in a), None)
    if "values_tensor" in a:
        values = np.asarray(a["values_tensor"])
    elif "values_strings" in a:
        values = np.array(a["values_strings"], dtype=object)
    elif "values_int64s" in a:
        values = np.array(a["values_int64s"], dtype=np.int64)
    elif "values_floats" in a:
        values = np.array(a["values_floats"], dtype=np.float32)
    else:
        raise ValueError(f"LabelEncoder {node.name!r}: no values_* attribute")
    if keys is None:
        raise ValueError(f"LabelEncoder {node.name!r}: no keys_* attribute")
    keys, values = keys.reshape(-1), values.reshape(-1)
    if len(keys) != len(values):
        raise ValueError(f"LabelEncoder {node.name!r}: {len(keys)} keys but {len(values)} values")
    if values.dtype.kind in ("U", "S", "O"):
        values = np.array([v.decode("utf-8") if isinstance(v, bytes) else v for v in values.tolist()], dtype=object)
    if "default_tensor" in a:
        default = np.asarray(a["default_tensor"]).reshape(-1)[0]
        default = default.decode("utf-8") if isinstance(default, bytes) else default
    elif values.dtype == object:
        default = a.get("default_string", "_Unused")
    elif values.dtype.kind == "f":
        default = a.get("default_float", -0.0)
    else:
        default = a.get("default_int64", -1)
    out_dtype = values.dtype

    if keys.dtype.kind in ("O", "U", "S"):
        # string tensors from the IR may hold bytes; the runtime's strings are str
        text = [k.decode("utf-8") if isinstance(k, bytes) else k for k in keys.tolist()]
        table = dict(zip(text, values.tolist()))

        def encode_strings(x):
            flat = np.asarray(x).reshape(-1).tolist()
            return np.array([table.get(s, default) for s in flat], dtype=out_dtype).reshape(np.shape(x))

        return encode_strings

    # numeric keys: sorted keys and a binary search, with NaN as a key of its own
    nan_keys = np.isnan(keys) if keys.dtype.kind == "f" else np.zeros(len(keys), dtype=bool)
    nan_value = values[nan_keys][0] if nan_keys.any() else default
    order = np.argsort(keys[~nan_keys], kind="stable")
    sorted_keys = keys[~nan_keys][order]
    sorted_values = values[~nan_keys][order]

    def encode(x):
        x = np.asarray(x)
        out = np.full(x.shape, default, dtype=out_dtype)
        if len(sorted_keys):
            pos = np.clip(np.searchsorted(sorted_keys, x), 0, len(sorted_keys) - 1)
            hit = sorted_keys[pos] == x
            out[hit] = sorted_values[pos[hit]]
        if x.dtype.kind == "f":
            out[np.isnan(x)] = nan_value
        return out

    return encode


# ------------------------------------------------------------------------------ trees


_MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4, "BRANCH_NEQ": 5, "BRANCH_MEMBER": 6}


def _walk(xf, start, start_done, features, modes, splits, true_next, false_next, true_done, false_done,
          missing_true, members) -> np.ndarray:
    """Walk every sample (rows of ``xf``) down every tree at once, one level per step.

    ``start``/``start_done``: per tree, the first index and whether it is already final.
    Returns the final index per (sample, tree). Modes: 0 LEQ, 1 LT, 2 GTE, 3 GT, 4 EQ, 5 NEQ,
    6 MEMBER (``members`` maps node index -> set values); NaN goes the true way where
    ``missing_true``.
    """
    n, n_trees = xf.shape[0], len(start)
    cur = np.broadcast_to(start, (n, n_trees)).copy()
    done = np.broadcast_to(start_done, (n, n_trees)).copy()
    sample = np.broadcast_to(np.arange(n)[:, None], (n, n_trees))
    while not done.all():
        active = ~done
        nodes = cur[active]
        v = xf[sample[active], features[nodes]]
        s = splits[nodes]
        m = modes[nodes]
        with np.errstate(invalid="ignore"):
            go = np.select(
                [m == 0, m == 1, m == 2, m == 3, m == 4, m == 5],
                [v <= s, v < s, v >= s, v > s, v == s, v != s],
                default=False,
            )
        for k in np.flatnonzero(m == 6):
            go[k] = bool(np.isin(v[k], members[int(nodes[k])]))
        go |= missing_true[nodes] & np.isnan(v)
        cur[active] = np.where(go, true_next[nodes], false_next[nodes])
        done[active] = np.where(go, true_done[nodes], false_done[nodes])
    return cur


# ------------------------------------------------------------------------------ feature ops


@kernel("ArrayFeatureExtractor", domain=ML)
def _array_feature_extractor(node, request):
    def extract(x, indices):
        index = np.asarray(indices).reshape(-1)
        # in [0, n) as onnxruntime requires (a negative one is not counted from the end:
        # skl2onnx's radius-neighbours models pad with -1, which onnxruntime refuses)
        if index.size and (index.min() < 0 or index.max() >= x.shape[-1]):
            raise IndexError(
                f"ArrayFeatureExtractor {node.name!r}: indices {index.tolist()} out of range: each must be in "
                f"[0, {x.shape[-1]}) (the last dimension)"
            )
        out = np.take(x, index, axis=-1)
        # a 1-D input gives one row, as onnxruntime does
        return out.reshape(1, -1) if x.ndim == 1 else out

    return extract


@kernel("Binarizer", domain=ML)
def _binarizer(node, request):
    threshold = float(node.attr("threshold", 0.0))
    return lambda x: (x > threshold).astype(x.dtype)


def _rows(x: np.ndarray) -> np.ndarray:
    return x.reshape(1, -1) if x.ndim == 1 else x


@kernel("Normalizer", domain=ML)
def _normalizer(node, request):
    norm = node.attr("norm", "MAX")
    if norm not in ("MAX", "L1", "L2"):
        raise ValueError(f"Normalizer {node.name!r}: norm {norm!r} not one of MAX, L1, L2")

    code = ("MAX", "L1", "L2").index(norm)

    def normalize(x):
        x = np.asarray(x)
        if x.dtype == np.float32 and x.ndim in (1, 2) and x.size and x.flags.c_contiguous:
            loop = _jit.normalize_rows()
            if loop is not None:
                y = np.empty_like(x)
                loop(_rows(x), code, _rows(y))
                return y
        r = _rows(x).astype(np.float32, copy=False)  # read only: the division makes the output
        if norm == "MAX":
            d = np.maximum.reduce(r, axis=1, keepdims=True)
        elif norm == "L1":
            d = np.add.reduce(np.abs(r), axis=1, keepdims=True)
        else:
            d = np.sqrt(np.add.reduce(r * r, axis=1, keepdims=True))
        # a row whose norm is 0 stays as it is, as onnxruntime leaves it (x / 0 was NaN: a
        # TF-IDF row of an empty document)
        d[d == 0] = 1
        return (r / d).reshape(x.shape)

    return normalize


@kernel("Scaler", domain=ML)
def _scaler(node, request):
    offset = np.asarray(node.attr("offset", [0.0]), dtype=np.float32)
    scale = np.asarray(node.attr("scale", [1.0]), dtype=np.float32)

    def scale_rows(x):
        if (type(x) is np.ndarray and x.dtype == np.float32 and x.ndim in (1, 2) and x.size and x.flags.c_contiguous
                and offset.size in (1, x.shape[-1]) and scale.size in (1, x.shape[-1])):
            loop = _jit.scale_rows()
            if loop is not None:
                y = np.empty_like(x)
                loop(_rows(x), offset, scale, _rows(y))
                return y
        y = np.subtract(np.asarray(x, dtype=np.float32), offset)  # float32, a new array
        y *= scale
        return y

    return scale_rows


@kernel("Imputer", domain=ML)
def _imputer(node, request):
    floats = node.attr("imputed_value_floats")
    ints = node.attr("imputed_value_int64s")
    imputed = np.asarray(floats if floats else ints)
    replaced = node.attr("replaced_value_float", 0.0) if floats else node.attr("replaced_value_int64", 0)

    def impute(x):
        x = np.asarray(x)
        r = _rows(x)
        if isinstance(replaced, float) and math.isnan(replaced):
            mask = np.isnan(r)
        else:
            mask = r == replaced
        fill = np.broadcast_to(imputed.astype(x.dtype), r.shape) if imputed.size in (1, r.shape[1]) else None
        if fill is None:
            raise ValueError(f"Imputer {node.name!r}: {imputed.size} imputed values for {r.shape[1]} features")
        return np.where(mask, fill, r).reshape(x.shape)

    return impute


@kernel("LinearRegressor", domain=ML)
def _linear_regressor(node, request):
    targets = int(node.attr("targets", 1))
    coef = np.asarray(node.attr("coefficients"), dtype=np.float32).reshape(targets, -1)
    intercepts = np.asarray(node.attr("intercepts") or [0.0] * targets, dtype=np.float32)
    post = _post_transform(node.attr("post_transform", "NONE"), node)
    return lambda x: post(_rows(np.asarray(x, dtype=np.float32)) @ coef.T + intercepts).astype(np.float32)


@kernel("CategoryMapper", domain=ML)
def _category_mapper(node, request):
    strings = list(node.attr("cats_strings") or [])
    ints = [int(i) for i in node.attr("cats_int64s") or []]
    if len(strings) != len(ints):
        raise ValueError(f"CategoryMapper {node.name!r}: cats_strings and cats_int64s differ in length")
    to_int = dict(zip(strings, ints))
    to_str = dict(zip(ints, strings))
    default_int = int(node.attr("default_int64", -1))
    default_str = node.attr("default_string", "_Unused")

    def mapper(x):
        x = np.asarray(x)
        flat = x.reshape(-1).tolist()
        if _strings_in(x):
            return np.array([to_int.get(s, default_int) for s in flat], dtype=np.int64).reshape(x.shape)
        return np.array([to_str.get(i, default_str) for i in flat], dtype=object).reshape(x.shape)

    return mapper


@kernel("FeatureVectorizer", domain=ML)
def _feature_vectorizer(node, request):
    dims = [int(d) for d in node.attr("inputdimensions") or []]

    def vectorize(*xs):
        parts = []
        for k, x in enumerate(xs):
            r = np.asarray(x, dtype=np.float32)
            r = as_rows(r)
            want = dims[k] if k < len(dims) else r.shape[1]
            if r.shape[1] < want:  # pad short inputs with zeros, cut long ones
                r = np.pad(r, ((0, 0), (0, want - r.shape[1])))
            parts.append(r[:, :want])
        return np.concatenate(parts, axis=1)

    return vectorize


@kernel("OneHotEncoder", domain=ML)
def _one_hot_encoder(node, request):
    cats = node.attr("cats_strings") or node.attr("cats_int64s") or []
    index = {c: i for i, c in enumerate(cats)}
    zeros = bool(node.attr("zeros", 1))

    def encode(x):
        x = np.asarray(x)
        flat = x.reshape(-1).tolist()
        pos = np.array([index.get(v if isinstance(v, str) else int(v), -1) for v in flat], dtype=np.int64)
        if not zeros and (pos < 0).any():
            bad = flat[int(np.flatnonzero(pos < 0)[0])]
            raise ValueError(f"OneHotEncoder {node.name!r}: unknown category {bad!r} and zeros=0")
        out = np.zeros((pos.size, len(cats)), dtype=np.float32)
        hit = pos >= 0
        out[np.flatnonzero(hit), pos[hit]] = 1.0
        return out.reshape(*x.shape, len(cats))

    return encode


@kernel("ZipMap", domain=ML)
def _zip_map(node, request):
    labels = node.attr("classlabels_strings") or node.attr("classlabels_int64s")
    if not labels:
        raise ValueError(f"ZipMap {node.name!r}: classlabels_strings or classlabels_int64s is required")
    labels = [s if isinstance(s, str) else int(s) for s in labels]

    def zip_map(x):
        r = _rows(np.asarray(x, dtype=np.float32))
        if r.shape[1] != len(labels):
            raise ValueError(f"ZipMap {node.name!r}: {r.shape[1]} columns for {len(labels)} labels")
        return [dict(zip(labels, row)) for row in r.tolist()]

    return Kernel(run=zip_map, single_output=True)


@kernel("DictVectorizer", domain=ML)
def _dict_vectorizer(node, request):
    vocabulary = node.attr("string_vocabulary") or [int(v) for v in node.attr("int64_vocabulary") or []]
    if not vocabulary:
        raise ValueError(f"DictVectorizer {node.name!r}: string_vocabulary or int64_vocabulary is required")
    column = {key: k for k, key in enumerate(vocabulary)}
    declared = request.value(node.outputs[0]).dtype

    def vectorize(maps):
        # one map gives one row, as onnxruntime does; a list of maps gives one row each
        rows = maps if isinstance(maps, list) else [maps]
        if not all(isinstance(m, dict) for m in rows):
            raise TypeError(f"DictVectorizer {node.name!r}: expected a dict (map), got {type(maps).__name__}")
        values = [v for m in rows for v in m.values()]
        dtype = declared if declared is not None else np.asarray(values or [0.0]).dtype
        out = np.zeros((len(rows), len(vocabulary)), dtype=dtype)
        for r, m in enumerate(rows):
            for key, value in m.items():
                k = column.get(key)
                if k is not None:
                    out[r, k] = value
        return out

    return vectorize


_LEGACY_AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")


class _NodeLocator:
    """The position of each (tree id, node id) in the legacy encoding's node lists, for arrays
    of them at once: the pairs packed into one int64 and binary-searched (a dict of pairs and a
    loop took 40 ms for a random forest of 60k nodes). A pair listed twice resolves to its last
    position, as the dict did; one listed nowhere is an error naming the attribute. Ids outside
    the packing's range (negative, or 2^32 and up) take the dict."""

    def __init__(self, tree_ids: np.ndarray, node_ids: np.ndarray, name: str):
        self.name = name
        self.packed = bool(_packable(tree_ids, node_ids).all())
        if self.packed:
            keys = _packed(tree_ids, node_ids)
            self.order = np.argsort(keys, kind="stable")
            self.sorted = keys[self.order]
        else:
            self.position = {(int(t), int(i)): k for k, (t, i) in enumerate(zip(tree_ids, node_ids))}

    def __call__(self, tree: np.ndarray, ids: np.ndarray, what: str) -> np.ndarray:
        if self.packed:
            valid = _packable(tree, ids)
            keys = np.where(valid, _packed(tree, ids), -1)
            at = np.searchsorted(self.sorted, keys, side="right") - 1  # the last of equal keys
            found = valid & (at >= 0) & (self.sorted[np.maximum(at, 0)] == keys) if len(self.sorted) else np.zeros_like(valid)
            if found.all():
                return self.order[at]
            k = int(np.flatnonzero(~found)[0])
        else:
            out = np.empty(len(ids), dtype=np.int64)
            for k, (t, i) in enumerate(zip(tree.tolist(), ids.tolist())):
                found_at = self.position.get((t, i))
                if found_at is None:
                    break
                out[k] = found_at
            else:
                return out
        raise ValueError(f"{self.name}: {what} refers to node {int(ids[k])} of tree {int(tree[k])}, which does not exist")


def _packable(tree: np.ndarray, ids: np.ndarray) -> np.ndarray:
    return (tree >= 0) & (tree < 1 << 30) & (ids >= 0) & (ids < 1 << 32)


def _packed(tree: np.ndarray, ids: np.ndarray) -> np.ndarray:
    return tree.astype(np.int64) * (1 << 32) + ids.astype(np.int64)


def _mode_codes(names, label: str) -> np.ndarray:
    """The ``_MODES`` code of each of a forest's nodes_modes (-1 for LEAF), by one comparison of
    the array per mode (a 4.8M-node LightGBM forest: a dict lookup per node took 1.4 s); the
    names as an array of str (the loader keeps a long list as one) or None."""
    names = np.asarray(names if names is not None else [], dtype=np.str_)
    codes = np.full(names.shape, -2, dtype=np.int64)
    for mode, code in (*_MODES.items(), ("LEAF", -1)):
        codes[names == mode] = code
    unknown = codes == -2
    if unknown.any():
        found = sorted(str(v) for v in np.unique(names[unknown]).tolist())
        raise ValueError(f"{label}: unknown nodes_modes {found}; valid: {', '.join([*_MODES, 'LEAF'])}")
    return codes


class _LegacyForest:
    """The legacy tree encoding (TreeEnsembleRegressor/Classifier): nodes addressed by (tree id,
    node id), leaves are nodes with mode LEAF, each leaf carries (target or class, weight) votes
    given by the ``<prefix>_treeids/_nodeids/_ids/_weights`` attributes."""

    def __init__(self, node, prefix: str):
        self.name = name = f"{node.op_type} {node.name!r}"

        def arr(key, dtype, default=None):
            for k in (f"{key}_as_tensor", key):
                values = node.array(k, dtype)
                if values is not None:
                    return values
            if default is None:
                raise ValueError(f"{name}: attribute {key!r} is required")
            return default

        self.arr = arr
        tree_ids, node_ids = arr("nodes_treeids", np.int64), arr("nodes_nodeids", np.int64)
        modes = _mode_codes(node.array("nodes_modes", None), name)
        is_leaf = modes < 0
        locate = _NodeLocator(tree_ids, node_ids, name)
        here = np.arange(len(modes))
        true_ids = np.where(is_leaf, node_ids, arr("nodes_truenodeids", np.int64))
        false_ids = np.where(is_leaf, node_ids, arr("nodes_falsenodeids", np.int64))
        self.true_next = np.where(is_leaf, here, locate(tree_ids, true_ids, "nodes_truenodeids"))
        self.false_next = np.where(is_leaf, here, locate(tree_ids, false_ids, "nodes_falsenodeids"))
        self.missing_true = arr("nodes_missing_value_tracks_true", np.int64, np.zeros(len(modes), np.int64)).astype(bool)
        self.features, self.splits = arr("nodes_featureids", np.int64), arr("nodes_values", np.float64)
        self.modes, self.is_leaf = modes, is_leaf
        # a tree's root is its first node that no other node points to; trees in the order
        # their roots come
        is_child = np.zeros(len(modes), dtype=bool)
        is_child[self.true_next[~is_leaf]] = True
        is_child[self.false_next[~is_leaf]] = True
        candidates = np.flatnonzero(~is_child)
        _, first = np.unique(tree_ids[candidates], return_index=True)
        self.roots = candidates[np.sort(first)].astype(np.int64)
        self.n_trees = len(self.roots)
        # leaf -> its votes, as CSR over node positions
        leaf_of = locate(arr(f"{prefix}_treeids", np.int64), arr(f"{prefix}_nodeids", np.int64), f"{prefix}_nodeids")
        self.vote_ids = arr(f"{prefix}_ids", np.int64)
        self.vote_weights = arr(f"{prefix}_weights", np.float64)
        order = np.argsort(leaf_of, kind="stable")
        self.starts = np.searchsorted(leaf_of[order], np.arange(len(modes) + 1))
        self.entry_id, self.entry_weight = self.vote_ids[order], self.vote_weights[order]

    def keep_first_votes(self) -> None:
        """Each leaf keeps only its first vote, as onnxruntime reads a leaf of a one-target
        ensemble (skl2onnx's decision_leaf output lists each leaf once per class: summed, a
        leaf id came out times the class count)."""
        voted = np.diff(self.starts) > 0
        first = self.starts[:-1][voted]
        self.starts = np.concatenate([[0], np.cumsum(voted)]).astype(self.starts.dtype)
        self.entry_id, self.entry_weight = self.entry_id[first], self.entry_weight[first]


def _one_row_classifier(node, labels: np.ndarray):
    """A two-class LinearClassifier of one coefficient row and one intercept as onnxruntime
    computes it (1.32): the float32 score s = x . w + b, the label ``labels[1]`` where s > 0,
    and the scores [1 - p, p] with p = logistic(s) for LOGISTIC, else p = s whatever the post
    transform (onnx.reference wrote [-s, s]). PROBIT: onnxruntime writes probit(s) of the N
    rows into the first N of the (N, 2) scores' values and leaves the others unwritten; they
    are 0 here, as onnxruntime's were when checked."""
    post_name = _post_name(node.attr("post_transform", "NONE"))
    weights = np.asarray(node.attr("coefficients"), dtype=np.float32)
    intercept = np.float32(node.attr("intercepts")[0])

    def classify(x):
        rows = _rows(np.asarray(x)).astype(np.float32)
        if rows.shape[1] > weights.size:
            raise ValueError(f"LinearClassifier {node.name!r}: the input has {rows.shape[1]} features, "
                             f"the node {weights.size} coefficients")
        score = rows @ weights[:rows.shape[1]]  # float32, then the intercept: onnxruntime's GEMM
        score += intercept
        label = np.where(score > 0, labels[1], labels[0])
        if post_name == "PROBIT":
            scores = np.zeros((len(score), 2), np.float32)
            scores.reshape(-1)[:len(score)] = probit(score)
            return [label, scores]
        p = logistic(score) if post_name == "LOGISTIC" else score
        scores = np.empty((len(score), 2), np.float32)
        np.subtract(np.float32(1), p, out=scores[:, 0])
        scores[:, 1] = p
        return [label, scores]

    return Kernel(run=classify)


@kernel("LinearClassifier", domain=ML)
def _linear_classifier(node, request):
    # a score per class, or two classes of one coefficient row (``_one_row_classifier``)
    strings = node.attr("classlabels_strings")
    labels = np.array(strings, dtype=object) if strings else np.asarray(node.attr("classlabels_ints") or [], dtype=np.int64)
    rows_of_weights = len(node.attr("intercepts") or [])
    if len(labels) == 2 and rows_of_weights == 1:
        return _one_row_classifier(node, labels)
    if len(labels) < 2:  # (onnxruntime refuses such a node too)
        raise ValueError(f"LinearClassifier {node.name!r}: {len(labels)} class label(s); a classifier needs two or more")
    n_classes = len(labels)
    coefficients = np.asarray(node.attr("coefficients"), dtype=np.float64)
    intercepts = np.asarray(node.attr("intercepts") or [0.0] * n_classes, dtype=np.float64)
    post = _post_transform(node.attr("post_transform", "NONE"), node)
    # onnxruntime reads the coefficients as a classes x features matrix, the features counted in
    # the input, and uses its first classes * features values (the iris example shipped in its
    # wheel has 12 coefficients, 3 classes and an input of 2 features: the first 6 are used)
    coef_t_by_features: dict[int, np.ndarray] = {}

    def coefficients_for(features: int) -> np.ndarray:
        coef_t = coef_t_by_features.get(features)
        if coef_t is None:
            if coefficients.size < n_classes * features:
                raise ValueError(
                    f"LinearClassifier {node.name!r}: the input has {features} features, {n_classes} classes "
                    f"need {n_classes * features} coefficients, the node has {coefficients.size}"
                )
            coef_t = coef_t_by_features[features] = coefficients[:n_classes * features].reshape(n_classes, features).T
        return coef_t
    plain_labels = labels.dtype == np.int64 and labels.tolist() == list(range(n_classes))  # label = index
    finish_softmax = {"NONE": 0, "SOFTMAX": 1}.get(_post_name(node.attr("post_transform", "NONE")))

    def classify(x):
        rows = _rows(np.asarray(x)).astype(np.float64)
        scores = np.dot(rows, coefficients_for(rows.shape[1]))  # np.dot: matmul's BLAS call, less overhead
        finish = _jit.linear_finish() if finish_softmax is not None else None
        if finish is not None:
            # the intercepts, the argmax and the post transform in one compiled pass (eight
            # numpy calls were most of a one-row run; its exp is LLVM's, numpy's is SIMD:
            # float64 values may differ in the last bit, the float32 outputs did not in 2M samples)
            n = scores.shape[0]
            best = np.empty(n, np.int64)
            probabilities = np.empty((n, n_classes), np.float32)
            finish(scores, intercepts, finish_softmax, best, probabilities)
            return [best if plain_labels else labels[best], probabilities]
        scores += intercepts
        best = first_max(scores)
        return [best if plain_labels else labels[best], post(scores).astype(np.float32)]

    return Kernel(run=classify)


def first_max(scores: np.ndarray) -> np.ndarray:
    """Each row's index of its first maximum as onnxruntime's classifiers find it
    (``std::max_element``): a NaN is never greater than the running maximum, and nothing is
    greater than a NaN in the first place, so a row starting with NaN gives 0 and a later NaN
    is passed over (numpy's argmax returns the first NaN's index)."""
    nan = np.isnan(scores)
    if not nan.any():
        return scores.argmax(axis=1)
    best = np.where(nan, -np.inf, scores).argmax(axis=1)
    best[nan[:, 0]] = 0
    return best


# SVMClassifier and SVMRegressor: svm.py (onnxruntime's kernels, probabilities and labels)

