"""ai.onnx.ml SVMClassifier as onnxruntime computes it.

onnx.reference (which ran this op before) differs from onnxruntime where models meet it: the
probabilities of ``SVC(probability=True)`` (onnxruntime applies libsvm's Platt sigmoid per class
pair and then libsvm's pairwise coupling, an iterative solve in float32), the label (one-vs-one
votes, first class on ties) and the two-class score layouts. This kernel follows onnxruntime's
CPU kernel (``core/providers/cpu/ml/svmclassifier.cc``), vectorised over the batch.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..registry import kernel
from . import _jit
from ._ort_math import logistic as _logistic
from ._ort_math import probit as _probit
from ._util import as_rows
from .elementwise import whole_power
from .ml import _post_transform, first_max

ML = "ai.onnx.ml"
_F = np.float32


def _softmax_rows(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(_F)


def _softmax_zero_rows(s: np.ndarray) -> np.ndarray:
    # onnxruntime: entries within 1e-7 of 0 are scaled by exp(-max) instead of exponentiated
    vmax = s.max(axis=1, keepdims=True)
    small = np.abs(s) <= _F(1e-7)
    e = np.where(small, s * np.exp(-vmax), np.exp(s - vmax))
    total = np.where(small, _F(0), e).sum(axis=1, keepdims=True)
    return (e / total).astype(_F)


_POST = {
    "NONE": lambda s: s,
    "LOGISTIC": _logistic,
    "SOFTMAX": _softmax_rows,
    "SOFTMAX_ZERO": _softmax_zero_rows,
    "PROBIT": _probit,
}


def _coupling(r: np.ndarray) -> np.ndarray:
    """libsvm's pairwise coupling (Wu, Lin and Weng, method 2) of pairwise probabilities
    r[n, i, j] ~ P(class i | i or j) into class probabilities (n, k), with onnxruntime's float32
    arithmetic, iteration order, stopping rule (max error < 0.005 / k) and 100-step cap."""
    n, k, _ = r.shape
    q = np.zeros((n, k, k), dtype=_F)
    for i in range(k):
        for j in range(k):
            if j != i:
                q[:, i, i] += r[:, j, i] * r[:, j, i]
        for j in range(i):
            q[:, i, j] = q[:, j, i]
        for j in range(i + 1, k):
            q[:, i, j] = -r[:, j, i] * r[:, i, j]
    p = np.full((n, k), _F(1) / _F(k), dtype=_F)
    eps = _F(0.005) / _F(k)
    active = np.ones(n, dtype=bool)
    for _ in range(100):
        qp = np.zeros((n, k), dtype=_F)
        for j in range(k):  # sequential float32 sums, as onnxruntime adds them
            qp += q[:, :, j] * p[:, j : j + 1]
        pqp = np.zeros(n, dtype=_F)
        for i in range(k):
            pqp += p[:, i] * qp[:, i]
        active &= np.abs(qp - pqp[:, None]).max(axis=1) >= eps
        if not active.any():
            break
        a = active
        for i in range(k):
            qii = q[a, i, i]
            diff = ((-qp[a, i] + pqp[a]) / qii).astype(_F)
            p[a, i] += diff
            one = _F(1) + diff
            pqp[a] = (pqp[a] + diff * (diff * qii + _F(2) * qp[a, i])) / one / one
            qp[a] = (qp[a] + diff[:, None] * q[a, i, :]) / one[:, None]
            p[a] /= one[:, None]
    return p


def _coupled(r: np.ndarray) -> np.ndarray:
    """``_coupling`` by the compiled loop where numba is there (the same float32 steps)."""
    loop = _jit.pairwise_coupling()
    if loop is None:
        return _coupling(r)
    p = np.empty(r.shape[:2], dtype=_F)
    loop(np.ascontiguousarray(r, dtype=_F), p)
    return p


class _SupportVectors(NamedTuple):
    """An SVM's support vectors (S, F) in float64 and their squared norms (S,), made once at
    kernel creation for ``_kernel_matrix``."""

    vectors: np.ndarray
    squares: np.ndarray


def _support_vectors(sv: np.ndarray) -> _SupportVectors:
    s64 = np.ascontiguousarray(sv, dtype=np.float64)
    return _SupportVectors(s64, (s64 * s64).sum(axis=1))


def _kernel_matrix(kind: str, gamma: float, coef0: float, degree: float, x: np.ndarray, sv: _SupportVectors) -> np.ndarray:
    """K(x, sv) for all rows and support vectors, (N, F) x (S, F) -> (N, S) float32."""
    x64, s64 = x.astype(np.float64), sv.vectors
    if kind == "RBF":
        d2 = (x64 * x64).sum(axis=1)[:, None] - 2.0 * (x64 @ s64.T) + sv.squares[None, :]
        # a row holding an infinity: the expansion's inf - inf is NaN where the distance itself
        # is infinite (the kernel 0, as onnxruntime's sum of squared differences gives it)
        infinite = np.isinf(x64).any(axis=1)
        if infinite.any():
            d2[infinite] = np.square(x64[infinite, None, :] - s64[None]).sum(axis=2)
        return np.exp(-gamma * np.maximum(d2, 0.0)).astype(_F)
    dot = x64 @ s64.T
    if kind == "LINEAR":
        return dot.astype(_F)
    dot = gamma * dot + coef0
    if kind == "POLY":
        return whole_power(dot, degree).astype(_F)
    return np.tanh(dot).astype(_F)  # SIGMOID


_KINDS = ("LINEAR", "POLY", "RBF", "SIGMOID")


def _kernel_spec(node, name: str) -> tuple[str, float, float, float]:
    """An SVM node's kernel_type (checked) and its kernel_params gamma, coef0, degree (0 where
    not given)."""
    kind = str(node.attr("kernel_type", "LINEAR"))
    if kind not in _KINDS:
        raise ValueError(f"{name}: kernel_type {kind!r} not one of {', '.join(_KINDS)}")
    gamma, coef0, degree = ([float(v) for v in node.attr("kernel_params") or []] + [0.0, 0.0, 0.0])[:3]
    return kind, gamma, coef0, degree


@kernel("SVMClassifier", domain=ML)
def _svm_classifier(node, request):
    name = f"SVMClassifier {node.name!r}"
    kind, gamma, coef0, degree = _kernel_spec(node, name)
    post_name = str(node.attr("post_transform", "NONE"))
    if post_name not in _POST:
        raise ValueError(f"{name}: post_transform {post_name!r} not one of {', '.join(_POST)}")
    post = _POST[post_name]
    strings = node.attr("classlabels_strings")
    labels = np.array(strings, dtype=object) if strings else np.asarray(node.attr("classlabels_ints") or [], dtype=np.int64)
    k = len(labels)
    if k == 0:
        raise ValueError(f"{name}: one of classlabels_strings, classlabels_ints is required")
    coefficients = np.asarray(node.attr("coefficients") or [], dtype=_F)
    if coefficients.size == 0:
        raise ValueError(f"{name}: coefficients are empty")
    rho = np.asarray(node.attr("rho") or [], dtype=_F)
    prob_a = np.asarray(node.attr("prob_a") or [], dtype=_F)
    prob_b = np.asarray(node.attr("prob_b") or [], dtype=_F)
    if prob_a.size != prob_b.size:
        raise ValueError(f"{name}: prob_a has {prob_a.size} values, prob_b {prob_b.size}")
    per_class = [int(v) for v in node.attr("vectors_per_class") or []]
    n_vectors = sum(per_class)
    pairs = [(i, j) for i in range(k - 1) for j in range(i + 1, k)]
    have_proba = prob_a.size > 0
    all_positive = bool((coefficients >= 0).all())

    if n_vectors > 0:  # libsvm's one-vs-one SVC
        if len(per_class) != k:
            raise ValueError(f"{name}: vectors_per_class has {len(per_class)} entries for {k} class labels")
        sv = np.asarray(node.attr("support_vectors") or [], dtype=_F)
        if sv.size % n_vectors:
            raise ValueError(f"{name}: {sv.size} support-vector values for {n_vectors} vectors")
        sv = _support_vectors(sv.reshape(n_vectors, -1))
        if coefficients.size < (k - 1) * n_vectors or rho.size < len(pairs):
            raise ValueError(
                f"{name}: needs {(k - 1) * n_vectors} coefficients and {len(pairs)} rho values, "
                f"has {coefficients.size} and {rho.size}"
            )
        if have_proba and prob_a.size < len(pairs):
            raise ValueError(f"{name}: needs {len(pairs)} prob_a/prob_b values, has {prob_a.size}")
        if k == 2 and not have_proba and post_name == "PROBIT":
            # onnxruntime writes one probit score into the two-column output and leaves the
            # other column unset: there is no answer of its to match
            raise NotImplementedError(f"{name}: two classes, no prob_a/prob_b and post_transform PROBIT")
        coef = coefficients[: (k - 1) * n_vectors].reshape(k - 1, n_vectors).astype(np.float64)
        start = np.concatenate([[0], np.cumsum(per_class)])
        blocks = [slice(start[c], start[c + 1]) for c in range(k)]
        # every pair's decision value as one product: column p holds pair (i, j)'s
        # coefficients, coef[j - 1] over class i's vectors and coef[i] over class j's
        pair_weights = np.zeros((n_vectors, len(pairs)))
        for p, (i, j) in enumerate(pairs):
            pair_weights[blocks[i], p] = coef[j - 1, blocks[i]]
            pair_weights[blocks[j], p] = coef[i, blocks[j]]
        pair_rho = rho[: len(pairs)].astype(np.float64)
        pair_first, pair_second = np.array(pairs, dtype=np.int64).reshape(-1, 2).T  # each pair's classes
        # a pair's vote as a product: its first class where its value is > 0, else its second
        first_votes = np.eye(k, dtype=np.int64)[pair_first]
        second_votes = np.eye(k, dtype=np.int64)[pair_second]
    else:  # liblinear: one row of weights per class, rho[0] added to every score
        if coefficients.size % k:
            raise ValueError(f"{name}: {coefficients.size} coefficients for {k} classes")
        weights = coefficients.reshape(k, -1)
        if rho.size < 1:
            raise ValueError(f"{name}: rho needs at least one value")

    def classify(x):
        xf = np.asarray(x, dtype=_F)
        xf = as_rows(xf)
        n = xf.shape[0]
        if n_vectors == 0:
            if xf.shape[1] != weights.shape[1]:
                raise ValueError(f"{name}: input has {xf.shape[1]} features, the model {weights.shape[1]}")
            scores = (xf.astype(np.float64) @ weights.T.astype(np.float64) + float(rho[0])).astype(_F)
            best = first_max(scores)
            label = labels[best]
            if k == 2 and not have_proba:  # onnxruntime's ChooseClass: a threshold on the top score
                top = scores.max(axis=1)
                label = np.where((top >= 0.5) if all_positive else (top > 0), labels[1], label)
            return [label, post(scores).astype(_F)]
        if xf.shape[1] != sv.vectors.shape[1]:
            raise ValueError(f"{name}: input has {xf.shape[1]} features, the support vectors {sv.vectors.shape[1]}")
        kern = _kernel_matrix(kind, gamma, coef0, degree, xf, sv).astype(np.float64)
        values = kern @ pair_weights + pair_rho
        wins = values > 0
        votes = wins.astype(np.int64) @ first_votes + (~wins).astype(np.int64) @ second_votes
        pair_scores = values.astype(_F)
        label = labels[np.argmax(votes, axis=1)]  # first of the most voted, like std::max_element
        if have_proba:
            v = _F(1) - _logistic(pair_scores * prob_a[: len(pairs)] + prob_b[: len(pairs)])
            v = np.clip(v, _F(1e-7), _F(1) - _F(1e-7))
            r = np.zeros((n, k, k), dtype=_F)
            r[:, pair_first, pair_second] = v
            r[:, pair_second, pair_first] = _F(1) - v
            return [label, post(_coupled(r)).astype(_F)]
        if k == 2:  # one score, expanded to two columns the way onnxruntime (1.32) does
            s = pair_scores[:, 0]
            first = {"NONE": -s, "LOGISTIC": None, "PROBIT": _probit(s)}.get(post_name, _F(1) - s)
            if post_name == "LOGISTIC":
                first, s = _logistic(-s), _logistic(s)
            return [label, np.stack([first, s], axis=1).astype(_F)]
        return [label, post(pair_scores).astype(_F)]

    return classify


@kernel("SVMRegressor", domain=ML)
def _svm_regressor(node, request):
    name = f"SVMRegressor {node.name!r}"
    kind, gamma, coef0, degree = _kernel_spec(node, name)
    coefficients = np.asarray(node.attr("coefficients") or [], dtype=np.float64)
    n_supports = int(node.attr("n_supports", 0))
    rho = float((node.attr("rho") or [0.0])[0])
    one_class = bool(node.attr("one_class", 0))
    post = _post_transform(node.attr("post_transform", "NONE"), node)
    support = None
    if n_supports > 0:
        support = _support_vectors(np.asarray(node.attr("support_vectors"), dtype=_F).reshape(n_supports, -1))

    def predict(x):
        xf = as_rows(np.asarray(x))
        if support is not None:
            if xf.shape[1] != support.vectors.shape[1]:
                raise ValueError(f"{name}: {xf.shape[1]} features, the support vectors have {support.vectors.shape[1]}")
            score = _kernel_matrix(kind, gamma, coef0, degree, xf, support).astype(np.float64) @ coefficients + rho
        else:  # a linear model: coefficients are the weights
            score = xf.astype(np.float64) @ coefficients + rho
        if one_class:
            score = np.where(score > 0, 1.0, -1.0)
        return post(score[:, None]).astype(np.float32)

    return predict
