"""Tree ensembles (ai.onnx.ml TreeEnsembleRegressor, TreeEnsembleClassifier, TreeEnsemble) as
one compiled loop over a flattened tree layout (numba).

Why: the numpy walk in ``ml.py`` moves every (sample, tree) pair one level per step, a dozen
array calls per level; for a model of a few hundred trees and one sample that is thousands of
numpy calls, 12 to 300x onnxruntime (a histogram gradient-boosting model: 27 ms against
0.09 ms). Here every encoding is first flattened into one node table (struct of arrays; leaves
are nodes of mode ``LEAF`` whose votes are a CSR slice), and one compiled loop walks each sample
down each tree and adds its votes in place, as onnxruntime's kernel does. Without numba (or
with ``ORT_EP_CPU_NUMBA=0``) the same table runs through ``ml._walk``, the numpy walk.

Scores are summed in float64 (onnxruntime sums float32 models in float32: differences of float32
rounding). Comparisons are exact either way: a float32 feature and threshold compare the same
in float64. Two-class TreeEnsembleClassifier follows onnxruntime's conventions (which column is
derived from which, with base values, and the label rule); the two that it leaves unspecified
(PROBIT, and one base value without a binary encoding) stay on onnx.reference.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ort_core import Kernel

from .. import threads
from ..registry import kernel
from . import _jit
from ._delegate import DELEGATED, reference_kernel
from ._util import SHAPE_CACHE_MAX, as_rows
from .ml import _LEGACY_AGGREGATES, _MODES, ML, _LegacyForest, _post_name, _post_transform, _walk

LEAF = -1
#: input dtypes the compiled loop reads as they are, by ``dtype.char`` (float32, float64; others
#: are copied to float64 first)
_LOOP_FLOATS = "fd"
MEMBER = _MODES["BRANCH_MEMBER"]
SUM, MIN, MAX = 0, 1, 2  # how votes combine (AVERAGE is SUM then a division)


@dataclass(frozen=True)
class FlatForest:
    """Every tree of an ensemble in one node table. Node k: ``mode[k]`` (``LEAF`` or a
    comparison of ``_MODES``) of feature ``feature[k]`` against ``split[k]``; children
    ``true_next[k]``/``false_next[k]`` (a leaf points at itself); NaN goes the true way where
    ``missing_true[k]``; a MEMBER node's set is ``member_values[member_start[k]:member_start[k+1]]``;
    a leaf's votes are ``vote_id/vote_weight[vote_start[k]:vote_start[k+1]]``."""

    roots: np.ndarray
    mode: np.ndarray
    feature: np.ndarray
    split: np.ndarray
    true_next: np.ndarray
    false_next: np.ndarray
    missing_true: np.ndarray
    member_start: np.ndarray
    member_values: np.ndarray
    vote_start: np.ndarray
    vote_id: np.ndarray
    vote_weight: np.ndarray

    def __post_init__(self) -> None:
        # what the compiled loop reads per node, in one row (one cache line): mode, NaN goes
        # true, feature, true child, false child, votes from/to, set values from/to
        table = np.stack([self.mode, self.missing_true, self.feature, self.true_next, self.false_next,
                          self.vote_start[:-1], self.vote_start[1:], self.member_start[:-1], self.member_start[1:]],
                         axis=1).astype(np.int32)
        object.__setattr__(self, "table", table)
        object.__setattr__(self, "roots32", self.roots.astype(np.int32))
        inner = self.feature[self.mode != LEAF]
        object.__setattr__(self, "max_feature", int(inner.max()) if len(inner) else -1)
        object.__setattr__(self, "max_vote", int(self.vote_id.max()) if len(self.vote_id) else -1)
        object.__setattr__(self, "_preorder", [])  # [Preorder or None] once asked (``preorder``)
        object.__setattr__(self, "_split", {})  # rows -> whether the walk is split, None: once seen (``_over_rows``)
        object.__setattr__(self, "_walkers", {})  # kind -> (compiled walk, its tables) or None (``_walker``)

    def preorder(self) -> Preorder | None:
        """The forest in ``Preorder``'s layout, made at the first call (by the compiled builder),
        or None where it does not apply."""
        made = self._preorder
        if not made:
            made.append(_make_preorder(self))
        return made[0]

    @property
    def n_trees(self) -> int:
        return len(self.roots)

    def _walker(self, kind: int) -> tuple[Callable, tuple] | None:
        """The compiled walk for ``kind`` and the tables it reads after the rows, or None (no
        numba: the numpy walk). Chosen once: picking it and gathering nine tables was a third
        of the one-row overhead of a 100-tree regressor's run."""
        if kind not in self._walkers:
            loop = _compiled()
            flat = self.preorder() if loop is not None and kind == SUM else None
            if flat is not None:
                walk = (_loops["preorder"], (flat.compare, flat.roots, flat.feature, flat.split, flat.true_next,
                                             flat.missing_true, flat.vote_start, flat.vote_id, flat.vote_weight))
            elif loop is not None:
                walk = (loop, (self.roots32, self.table, self.split, self.member_values, self.vote_id,
                               self.vote_weight, kind))
            else:
                walk = None
            self._walkers[kind] = walk
        return self._walkers[kind]

    def aggregate(self, x: np.ndarray, kind: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, voted) of shape (rows, n_out): the votes of every tree combined by ``kind``
        (SUM, MIN, MAX), 0 where no tree voted; ``voted`` says where one did."""
        rows = as_rows(x)
        walk = self._walker(kind)
        if walk is not None and rows.dtype.char in _LOOP_FLOATS and rows.flags.c_contiguous:
            # float32 as it is: the loop compares in float64 (a float32 feature converts
            # exactly), so the copy to float64 the numpy walk needs is not made
            xf = rows
        else:
            xf = np.ascontiguousarray(rows, dtype=np.float64)
        self._check_sizes(xf.shape[1], n_out)
        scores = np.zeros((xf.shape[0], n_out))
        voted = np.zeros((xf.shape[0], n_out), dtype=np.bool_)
        if walk is None:
            self._aggregate_numpy(xf, kind, scores, voted)
            return scores, voted
        walker, tables = walk
        n = xf.shape[0]
        if not self._splits(n):  # too little work to split: called directly
            walker(xf, *tables, scores, voted)
        else:
            _over_rows(lambda lo, hi: walker(xf[lo:hi], *tables, scores[lo:hi], voted[lo:hi]), n, self._split)
        return scores, voted

    def _check_sizes(self, features: int, n_out: int) -> None:
        """A clear error where a leaf votes past the outputs or a node reads past the features."""
        if self.max_vote >= n_out:
            raise ValueError(f"a leaf votes for output {self.max_vote}, but there are {n_out}")
        if self.max_feature >= features:
            raise ValueError(f"a node reads feature {self.max_feature}, but the input has {features}")

    def _splits(self, rows: int) -> bool:
        """Whether a walk of ``rows`` rows is worth splitting over the session's threads."""
        return rows * self.n_trees >= SPLIT_MIN_WALKS and rows >= 8

    def _summed_walk(self, x: np.ndarray, which: str, n_out: int) -> tuple[np.ndarray, Callable, tuple] | None:
        """(rows, the compiled ``which`` loop, the preorder walk's tables) where a walk summing
        the votes and its finish run as one compiled call: numba, the preorder layout, a
        C-contiguous float32/64 input, too few rows to split the walk over threads; else None
        (the caller takes ``aggregate``)."""
        rows = as_rows(x) if x.ndim else None
        walk = self._walker(SUM)
        fused = _compiled(which)
        if (rows is None or walk is None or walk[0] is not _loops.get("preorder") or fused is None
                or rows.dtype.char not in _LOOP_FLOATS or not rows.flags.c_contiguous
                or self._splits(rows.shape[0])):
            return None
        self._check_sizes(rows.shape[1], n_out)
        return rows, fused, walk[1]

    def summed_regression(self, x: np.ndarray, divisor: float, base: np.ndarray, dtype) -> np.ndarray | None:
        """A regression without a post transform in one compiled call (the preorder walk summing
        the votes, then scores / divisor + base, 0 where no tree voted): (rows, len(base)) of
        ``dtype`` (float32 or float64), or None (another ``dtype``, or ``_summed_walk``'s None).
        Without its allocations and second call, hgb-regressor's one-row kernel went 5.6 -> 5.0 us."""
        if np.dtype(dtype).char not in _LOOP_FLOATS:
            return None
        found = self._summed_walk(x, "preorder_regression", len(base))
        if found is None:
            return None
        rows, fused, tables = found
        out = np.empty((rows.shape[0], len(base)), dtype)
        fused(rows, *tables, divisor, base, out)
        return out

    def summed_classification(self, x: np.ndarray, n_classes: int, finish: tuple) -> tuple[np.ndarray, np.ndarray] | None:
        """A classifier in one compiled call: the preorder walk summing the votes, then
        ``_two_class_py``'s rules (two classes) or ``_many_class_py``'s, given ``finish`` (the
        finish's arguments between the votes and the outputs): (the winning class indices, the
        float32 (rows, n_classes) scores), or None (``_summed_walk``). One-row kernels,
        hgb-classifier 4.0 -> 3.6 us, rf-classifier (3 classes) 6.5 -> 5.7 us."""
        which = "preorder_two_class" if n_classes == 2 else "preorder_many_class"
        found = self._summed_walk(x, which, n_classes)
        if found is None:
            return None
        rows, fused, tables = found
        out = np.empty((rows.shape[0], n_classes), np.float32)
        wins = np.empty(rows.shape[0], np.int64)
        fused(rows, *tables, *finish, out, wins)
        return wins, out

    def _aggregate_numpy(self, xf: np.ndarray, kind: int, scores: np.ndarray, voted: np.ndarray) -> None:
        is_leaf = self.mode == LEAF
        members = {int(k): self.member_values[self.member_start[k]:self.member_start[k + 1]]
                   for k in np.flatnonzero(self.mode == MEMBER)}
        leaves = _walk(xf, self.roots, is_leaf[self.roots], self.feature, self.mode, self.split, self.true_next,
                       self.false_next, is_leaf[self.true_next], is_leaf[self.false_next], self.missing_true,
                       members)
        lo, hi = self.vote_start[leaves].ravel(), self.vote_start[leaves + 1].ravel()
        counts = hi - lo
        rows = np.repeat(np.repeat(np.arange(xf.shape[0]), self.n_trees), counts)
        entries = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        ids, weights = self.vote_id[entries], self.vote_weight[entries]
        if kind == SUM:
            np.add.at(scores, (rows, ids), weights)
        else:  # a target's first vote replaces the 0
            scores[rows, ids] = np.inf if kind == MIN else -np.inf
            (np.minimum if kind == MIN else np.maximum).at(scores, (rows, ids), weights)
        voted[rows, ids] = True


@dataclass(frozen=True)
class Preorder:
    """A forest whose inner nodes all make one comparison (``compare``: BRANCH_LEQ, LT, GTE or
    GT; scikit-learn's, LightGBM's and XGBoost's converters write one of them) and where no node
    is reached twice, laid out for the walk: each tree's nodes in depth-first preorder, so a
    node's false child is the next node and only the true child is stored; ``feature`` is -1 at
    a leaf. Per step the walk reads three small arrays instead of a row of nine ints, and
    ``_preorder_py`` walks four samples at once so that their independent loads overlap (a
    histogram gradient-boosting model of 100 trees at batch 8: 19 -> 8 us)."""

    compare: int
    roots: np.ndarray  # int64
    feature: np.ndarray  # int32
    split: np.ndarray  # float64
    true_next: np.ndarray  # int64
    missing_true: np.ndarray  # bool
    vote_start: np.ndarray  # int64, one more than the nodes
    vote_id: np.ndarray
    vote_weight: np.ndarray


def _make_preorder(forest: FlatForest) -> Preorder | None:
    """``forest`` as a ``Preorder``, or None: mixed or other comparisons, a node shared by two
    parents (or a cycle), or no compiled builder."""
    inner = forest.mode[forest.mode != LEAF]
    compares = np.unique(inner)
    if len(compares) > 1 or (len(compares) and int(compares[0]) > 3):
        return None
    build = _compiled("preorder_builder")
    if build is None:
        return None
    n = len(forest.mode)
    order = np.empty(n, np.int64)
    roots = np.empty(len(forest.roots), np.int64)
    count = build(forest.roots.astype(np.int64), forest.mode.astype(np.int64), forest.true_next.astype(np.int64),
                  forest.false_next.astype(np.int64), order, roots)
    if count < 0:
        return None
    order = order[:count]
    position = np.full(n, -1, np.int64)
    position[order] = np.arange(count)
    leaf = forest.mode[order] == LEAF
    counts = forest.vote_start[order + 1] - forest.vote_start[order]
    vote_start = np.zeros(count + 1, np.int64)
    np.cumsum(counts, out=vote_start[1:])
    entries = np.repeat(forest.vote_start[order] - vote_start[:-1], counts) + np.arange(int(vote_start[-1]))
    return Preorder(
        compare=int(compares[0]) if len(compares) else 0,
        roots=roots,
        feature=np.where(leaf, -1, forest.feature[order]).astype(np.int32),
        split=np.ascontiguousarray(forest.split[order], dtype=np.float64),
        true_next=np.where(leaf, 0, position[forest.true_next[order]]),
        missing_true=forest.missing_true[order].astype(np.bool_),
        vote_start=vote_start, vote_id=forest.vote_id[entries], vote_weight=forest.vote_weight[entries],
    )


def _from_legacy(forest: _LegacyForest) -> FlatForest:
    empty_f, nodes = np.zeros(0), len(forest.modes)
    return FlatForest(
        roots=forest.roots, mode=forest.modes, feature=forest.features, split=forest.splits,
        true_next=forest.true_next, false_next=forest.false_next, missing_true=forest.missing_true,
        member_start=np.zeros(nodes + 1, np.int64), member_values=empty_f,
        vote_start=forest.starts.astype(np.int64), vote_id=forest.entry_id, vote_weight=forest.entry_weight,
    )


def _from_v5(node) -> tuple[FlatForest, int]:
    """TreeEnsemble (ai.onnx.ml 5): nodes and leaves are separate tables; here leaves follow the
    nodes in one index space, each voting once for its target."""
    a = node.attributes
    name = f"TreeEnsemble {node.name!r}"

    def arr(key, dtype, default=None):
        values = node.array(key, dtype)
        if values is None:
            if default is None:
                raise ValueError(f"{name}: attribute {key!r} is required")
            return default
        return values

    modes = arr("nodes_modes", np.int64)
    n_nodes = len(modes)
    if np.any((modes < 0) | (modes > MEMBER)):
        raise ValueError(f"{name}: nodes_modes must be 0..6, got {sorted(set(modes.tolist()) - set(range(7)))}")
    leaf_targets, leaf_weights = arr("leaf_targetids", np.int64), arr("leaf_weights", np.float64)
    n_leaves = len(leaf_targets)
    true_ids, false_ids = arr("nodes_truenodeids", np.int64), arr("nodes_falsenodeids", np.int64)
    true_leaf = arr("nodes_trueleafs", np.int64).astype(bool)
    false_leaf = arr("nodes_falseleafs", np.int64).astype(bool)
    for ids, leaf, what in ((true_ids, true_leaf, "true"), (false_ids, false_leaf, "false")):
        bound = np.where(leaf, n_leaves, n_nodes)
        bad = (ids < 0) | (ids >= bound)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{name}: node {k}'s {what} branch {int(ids[k])} is out of range")
    here = np.arange(n_nodes + n_leaves)
    true_next = np.concatenate([np.where(true_leaf, true_ids + n_nodes, true_ids), here[n_nodes:]])
    false_next = np.concatenate([np.where(false_leaf, false_ids + n_nodes, false_ids), here[n_nodes:]])
    missing = arr("nodes_missing_value_tracks_true", np.int64, np.zeros(n_nodes, np.int64)).astype(bool)
    # set-membership nodes take their sets, NaN-separated, in node order
    member_start = np.zeros(n_nodes + n_leaves + 1, np.int64)
    member_values = np.zeros(0)
    member_nodes = np.flatnonzero(modes == MEMBER)
    if len(member_nodes):
        values = arr("membership_values", np.float64)
        sets = [g[~np.isnan(g)] for g in np.split(values, np.flatnonzero(np.isnan(values)))]
        if len(sets) < len(member_nodes):
            raise ValueError(f"{name}: membership_values has {len(sets)} sets for {len(member_nodes)} member nodes")
        sizes = np.zeros(n_nodes + n_leaves, np.int64)
        sizes[member_nodes] = [len(sets[j]) for j in range(len(member_nodes))]
        member_start[1:] = np.cumsum(sizes)
        member_values = np.concatenate([sets[j] for j in range(len(member_nodes))])
    pad = np.zeros(n_leaves, np.int64)
    forest = FlatForest(
        roots=arr("tree_roots", np.int64),
        mode=np.concatenate([modes, np.full(n_leaves, LEAF, np.int64)]),
        feature=np.concatenate([arr("nodes_featureids", np.int64), pad]),
        split=np.concatenate([arr("nodes_splits", np.float64), np.zeros(n_leaves)]),
        true_next=true_next, false_next=false_next,
        missing_true=np.concatenate([missing, pad.astype(bool)]),
        member_start=member_start, member_values=member_values,
        vote_start=np.concatenate([np.zeros(n_nodes, np.int64), np.arange(n_leaves + 1)]),
        vote_id=leaf_targets, vote_weight=leaf_weights,
    )
    n_targets = int(a.get("n_targets", int(leaf_targets.max(initial=0)) + 1))
    return forest, n_targets


# ------------------------------------------------------------------------------ the compiled loop


def _forest_py(x, roots, table, split, member_values, vote_id, vote_weight, kind, scores, voted):  # pragma: no cover - compiled by numba
    # tree by tree, so that a tree's nodes stay in cache over the rows (each row still adds its
    # trees' votes in tree order)
    for t in range(roots.shape[0]):
        for r in range(x.shape[0]):
            k = roots[t]
            m = table[k, 0]
            while m >= 0:
                v = x[r, table[k, 2]]
                s = split[k]
                if m == 0:
                    go = v <= s
                elif m == 1:
                    go = v < s
                elif m == 2:
                    go = v >= s
                elif m == 3:
                    go = v > s
                elif m == 4:
                    go = v == s
                elif m == 5:
                    go = v != s
                else:
                    go = False
                    for j in range(table[k, 7], table[k, 8]):
                        if member_values[j] == v:
                            go = True
                            break
                if not go and table[k, 1] and v != v:
                    go = True
                k = table[k, 3] if go else table[k, 4]
                m = table[k, 0]
            for j in range(table[k, 5], table[k, 6]):
                c = vote_id[j]
                w = vote_weight[j]
                if kind == 0:
                    if voted[r, c]:
                        scores[r, c] += w
                    else:
                        scores[r, c] = w
                elif not voted[r, c] or (kind == 1 and w < scores[r, c]) or (kind == 2 and w > scores[r, c]):
                    scores[r, c] = w
                voted[r, c] = True


def _preorder_builder_py(roots, mode, true_next, false_next, order, new_roots):  # pragma: no cover - compiled by numba
    """Each tree's nodes into ``order`` in depth-first preorder, the false child first (so it
    follows its node); ``new_roots[t]``: where tree t starts. Returns the node count, or -1
    where a node is reached twice (shared, or a cycle)."""
    n = mode.shape[0]
    seen = np.zeros(n, np.bool_)
    stack = np.empty(2 * n + 2, np.int64)
    count = 0
    for t in range(roots.shape[0]):
        new_roots[t] = count
        stack[0] = roots[t]
        top = 1
        while top:
            top -= 1
            k = stack[top]
            if k < 0 or k >= n or seen[k]:
                return -1
            seen[k] = True
            order[count] = k
            count += 1
            if mode[k] >= 0:
                if top + 2 > stack.shape[0]:
                    return -1
                stack[top] = true_next[k]  # popped after the whole false subtree
                stack[top + 1] = false_next[k]
                top += 2
    return count


def _goes_true_py(v, s, compare, missing_true):  # pragma: no cover - compiled by numba
    if compare == 0:
        go = v <= s
    elif compare == 1:
        go = v < s
    elif compare == 2:
        go = v >= s
    else:
        go = v > s
    return go or (missing_true and v != v)


def _vote_py(scores, voted, r, k, vote_start, vote_id, vote_weight):  # pragma: no cover - compiled by numba
    for j in range(vote_start[k], vote_start[k + 1]):
        scores[r, vote_id[j]] += vote_weight[j]
        voted[r, vote_id[j]] = True


def _preorder_py(x, compare, roots, feature, split, true_next, missing_true, vote_start, vote_id, vote_weight,
                 scores, voted):  # pragma: no cover - compiled by numba
    """The votes of every tree summed into ``scores`` (zeros) for each row of x, tree by tree
    (each row adds its trees' votes in tree order, as ``_forest_py`` does), four rows a walk."""
    n = x.shape[0]
    for t in range(roots.shape[0]):
        root = roots[t]
        r = 0
        while r + 4 <= n:
            k0 = k1 = k2 = k3 = root
            while True:
                f0, f1, f2, f3 = feature[k0], feature[k1], feature[k2], feature[k3]
                if f0 < 0 and f1 < 0 and f2 < 0 and f3 < 0:
                    break
                if f0 >= 0:
                    k0 = true_next[k0] if _goes_true(x[r, f0], split[k0], compare, missing_true[k0]) else k0 + 1
                if f1 >= 0:
                    k1 = true_next[k1] if _goes_true(x[r + 1, f1], split[k1], compare, missing_true[k1]) else k1 + 1
                if f2 >= 0:
                    k2 = true_next[k2] if _goes_true(x[r + 2, f2], split[k2], compare, missing_true[k2]) else k2 + 1
                if f3 >= 0:
                    k3 = true_next[k3] if _goes_true(x[r + 3, f3], split[k3], compare, missing_true[k3]) else k3 + 1
            _vote(scores, voted, r, k0, vote_start, vote_id, vote_weight)
            _vote(scores, voted, r + 1, k1, vote_start, vote_id, vote_weight)
            _vote(scores, voted, r + 2, k2, vote_start, vote_id, vote_weight)
            _vote(scores, voted, r + 3, k3, vote_start, vote_id, vote_weight)
            r += 4
        while r < n:
            k = root
            f = feature[k]
            while f >= 0:
                k = true_next[k] if _goes_true(x[r, f], split[k], compare, missing_true[k]) else k + 1
                f = feature[k]
            _vote(scores, voted, r, k, vote_start, vote_id, vote_weight)
            r += 1


#: a walk over this many rows that took longer than this on one thread is split by rows over
#: the session's threads from then on (the compiled loops release the GIL). Handing rows to a
#: worker costs 60-90 us here, so a shorter walk is slower split (measured with LightGBM and
#: XGBoost models of 200-300 trees, us one thread / split: 8 rows 31 / 96, 16 rows 183 / 181,
#: 32 rows 512 / 307, 64 rows 470 / 303, 256 rows 4575 / 2415)
SPLIT_MIN_SECONDS = 200e-6
#: ... and only walks of this many (row, tree) pairs or more are timed for it: one timing can be
#: slow by chance (another process on the core), and a small walk split for good pays the
#: hand-off on every run (a 100-tree forest at 8 rows: 26 -> 71 us in one bench run)
SPLIT_MIN_WALKS = 1 << 13
_pool: ThreadPoolExecutor | None = None
_pool_size = 0


def _forget_pool() -> None:
    """In a forked child: the parent's workers do not exist there, and a pool that believes
    they do would wait for them forever."""
    global _pool, _pool_size
    _pool, _pool_size = None, 0


os.register_at_fork(after_in_child=_forget_pool)


def _over_rows(walk: Callable[[int, int], None], rows: int, split: dict[int, bool | None]) -> None:
    """``walk(lo, hi)`` over every row: on this thread, or in contiguous row ranges over the
    session's threads (this one takes the first) where one thread took longer than
    ``SPLIT_MIN_SECONDS`` for this many rows.
    ``split`` (rows -> whether) is learned from the second walk of each row count: the first
    can include numba's compilation or cache load. (Callers walk fewer rows, under
    ``SPLIT_MIN_WALKS`` walks or 8 rows, on their own thread without asking.)"""
    global _pool, _pool_size
    if rows not in split:  # the first walk: not timed
        if len(split) >= SHAPE_CACHE_MAX:
            split.clear()
        split[rows] = None
        walk(0, rows)
        return
    parts = min(threads.usable(), rows // 4) if split[rows] else 1
    if parts <= 1:
        start = time.perf_counter()
        walk(0, rows)
        if split[rows] is None:
            split[rows] = time.perf_counter() - start > SPLIT_MIN_SECONDS
        return
    with _lock:
        if _pool is None or _pool_size < parts - 1:
            _pool, _pool_size = ThreadPoolExecutor(max_workers=parts - 1, thread_name_prefix="ort-ep-cpu-trees"), parts - 1
        pool = _pool
    bounds = [rows * i // parts for i in range(parts + 1)]
    others = [pool.submit(walk, bounds[i], bounds[i + 1]) for i in range(1, parts)]
    walk(bounds[0], bounds[1])
    for i, other in enumerate(others, 1):
        if other.cancel():  # not started (its worker late: a busy core): this thread walks it
            walk(bounds[i], bounds[i + 1])
        else:
            other.result()


# post transforms the two-class finaliser applies in its loop (codes of ``ml._POST_CODES``)
POST_NONE, POST_SOFTMAX, POST_LOGISTIC, POST_SOFTMAX_ZERO = 0, 1, 2, 3


def _two_class_py(scores, voted, n_base, base0, base1, threshold, one_minus, post, out, wins):  # pragma: no cover - compiled by numba
    # onnxruntime's two-class rules, row by row (the numpy form, ``_two_class_numpy``, says why
    # each one is so); ``out`` is float32, the float64 values cast once at the end of each row
    for r in range(scores.shape[0]):
        s0 = scores[r, 0]
        s1 = scores[r, 1]
        has0 = voted[r, 0]
        has1 = voted[r, 1]
        if n_base == 2:
            if has1:
                s1 = base1 + s0
                s0 = -(base1 + s0)
            else:
                s1 = s1 + base1
                s0 = s0 + base0
            two = True
        else:
            if n_base == 1:
                s0 = s0 + base0
            two = has1
        if two and has1:
            weight = s1
        elif has0:
            weight = s0
        else:
            weight = 0.0
        wins[r] = 1 if weight > threshold else 0
        if two:
            o0 = s0 if has0 else 0.0
            o1 = s1 if has1 else 0.0
            if post == 2:
                o0 = 1.0 / (1.0 + np.exp(-o0))
                o1 = 1.0 / (1.0 + np.exp(-o1))
            elif post == 1 or post == 3:
                m = max(o0, o1)
                if post == 3:
                    e0 = 0.0 if o0 == 0 else np.exp(o0 - m)
                    e1 = 0.0 if o1 == 0 else np.exp(o1 - m)
                    total = e0 + e1
                    if total != 0:
                        o0, o1 = e0 / total, e1 / total
                    else:
                        o0, o1 = 0.0, 0.0
                else:
                    e0 = np.exp(o0 - m)
                    e1 = np.exp(o1 - m)
                    total = e0 + e1
                    o0, o1 = e0 / total, e1 / total
        elif post == 2:
            o0 = 1.0 / (1.0 + np.exp(s0))
            o1 = 1.0 / (1.0 + np.exp(-s0))
        else:
            o0 = 1.0 - s0 if one_minus else -s0
            o1 = s0
        out[r, 0] = o0
        out[r, 1] = o1


def _many_class_py(scores, voted, base, out, wins):  # pragma: no cover - compiled by numba
    """The multi-class classifier's finish without a post transform, per row: the base values
    added to the first classes (which then count as voted), the label the first best voted
    class (numpy's argmax over the votes with -inf where none: the first NaN wins, and class 0
    where no class was voted), the scores as float32."""
    rows, n = scores.shape
    for r in range(rows):
        for j in range(base.size):
            scores[r, j] += base[j]
            voted[r, j] = True
        best = 0
        best_value = -np.inf
        for j in range(n):
            value = scores[r, j] if voted[r, j] else -np.inf
            if np.isnan(value):
                best = j
                break
            if value > best_value:
                best, best_value = j, value
        wins[r] = best
        for j in range(n):
            out[r, j] = scores[r, j]


def _summed_votes_py(x, compare, roots, feature, split, true_next, missing_true, vote_start, vote_id, vote_weight,
                     shape):  # pragma: no cover - compiled by numba
    """``_preorder_py``'s walk into new (scores, voted) of ``shape``: the fused loops' first half."""
    scores = np.zeros(shape)
    voted = np.zeros(shape, np.bool_)
    _preorder(x, compare, roots, feature, split, true_next, missing_true, vote_start, vote_id, vote_weight,
              scores, voted)
    return scores, voted


def _preorder_regression_py(x, compare, roots, feature, split, true_next, missing_true, vote_start, vote_id,
                            vote_weight, divisor, base, out):  # pragma: no cover - compiled by numba
    """``_preorder_py``'s walk, then ``_regression_py``'s finish, in one call (see
    ``FlatForest.summed_regression``)."""
    scores, voted = _summed_votes(x, compare, roots, feature, split, true_next, missing_true, vote_start, vote_id,
                                  vote_weight, out.shape)
    _regression(scores, voted, divisor, base, out)


def _preorder_two_class_py(x, compare, roots, feature, split, true_next, missing_true, vote_start, vote_id,
                           vote_weight, n_base, base0, base1, threshold, one_minus, post, out,
                           wins):  # pragma: no cover - compiled by numba
    """``_preorder_py``'s walk, then ``_two_class_py``'s finish, in one call (see
    ``FlatForest.summed_classification``)."""
    scores, voted = _summed_votes(x, compare, roots, feature, split, true_next, missing_true, vote_start, vote_id,
                                  vote_weight, out.shape)
    _two_class(scores, voted, n_base, base0, base1, threshold, one_minus, post, out, wins)


def _preorder_many_class_py(x, compare, roots, feature, split, true_next, missing_true, vote_start, vote_id,
                            vote_weight, base, out, wins):  # pragma: no cover - compiled by numba
    """``_preorder_py``'s walk, then ``_many_class_py``'s finish, in one call (see
    ``FlatForest.summed_classification``)."""
    scores, voted = _summed_votes(x, compare, roots, feature, split, true_next, missing_true, vote_start, vote_id,
                                  vote_weight, out.shape)
    _many_class(scores, voted, base, out, wins)


def _regression_py(scores, voted, divisor, base, out):  # pragma: no cover - compiled by numba
    """A regression's finish without a post transform, as ``_finish_regression``'s numpy form,
    cast to ``out``'s type."""
    rows, n = scores.shape
    for r in range(rows):
        for j in range(n):
            out[r, j] = scores[r, j] / divisor + base[j] if voted[r, j] else 0.0


_lock = threading.Lock()
_loops: dict[str, Callable] = {}  # set by _load: "forest", "two_class", "many_class", "regression", "preorder",
#: "preorder_builder", "preorder_regression", "preorder_two_class", "preorder_many_class"
_goes_true: Callable | None = None  # the compiled _goes_true_py and _vote_py: globals of _preorder_py
_vote: Callable | None = None
#: the compiled _preorder_py and finishes: globals of the fused loops (_preorder_regression_py,
#: _preorder_two_class_py, _preorder_many_class_py)
_preorder: Callable | None = None
_regression: Callable | None = None
_two_class: Callable | None = None
_many_class: Callable | None = None
_summed_votes: Callable | None = None
_tried = False


def _compiled(which: str = "forest") -> Callable | None:
    """A compiled loop of this module, or None without numba (or with ``_jit.USE`` off):
    "forest" (``_forest_py``), "two_class" (``_two_class_py``), "many_class" (``_many_class_py``),
    "regression" (``_regression_py``), "preorder" (``_preorder_py``), "preorder_builder"
    (``_preorder_builder_py``), "preorder_regression" (``_preorder_regression_py``),
    "preorder_two_class" (``_preorder_two_class_py``), "preorder_many_class"
    (``_preorder_many_class_py``)."""
    if not _jit.USE:
        return None
    if not _tried:
        _load()
    return _loops.get(which)


def _load() -> None:
    global _goes_true, _vote, _preorder, _regression, _two_class, _many_class, _summed_votes, _tried
    with _lock:
        if _tried:
            return
        try:
            import numba
        except ImportError:  # numba does not install everywhere: the numpy walk runs
            pass
        else:
            options = {"nogil": True, "boundscheck": False}
            _goes_true = numba.njit(inline="always", **options)(_goes_true_py)
            _vote = numba.njit(inline="always", **options)(_vote_py)
            try:
                numba.njit(cache=True, **options)(_two_class_py)
                cached = True
            except RuntimeError:  # no writable cache location: compile in each process
                cached = False
            for name, loop in (("forest", _forest_py), ("two_class", _two_class_py), ("many_class", _many_class_py),
                               ("regression", _regression_py), ("preorder", _preorder_py),
                               ("preorder_builder", _preorder_builder_py)):
                _loops[name] = numba.njit(cache=cached, **options)(loop)
            _preorder, _regression = _loops["preorder"], _loops["regression"]
            _two_class, _many_class = _loops["two_class"], _loops["many_class"]
            _summed_votes = numba.njit(inline="always", **options)(_summed_votes_py)
            for name, loop in (("preorder_regression", _preorder_regression_py),
                               ("preorder_two_class", _preorder_two_class_py),
                               ("preorder_many_class", _preorder_many_class_py)):
                _loops[name] = numba.njit(cache=cached, **options)(loop)
        _tried = True


# ------------------------------------------------------------------------------ the kernels


def _out_dtype(x: np.ndarray):
    return x.dtype if x.dtype.kind == "f" else np.float32


def _finish_regression(scores: np.ndarray, voted: np.ndarray, divisor: float, per_target: np.ndarray | None,
                       post: Callable, dtype, base: np.ndarray | None = None) -> np.ndarray:
    """The regression's output: scores / divisor + base (in onnxruntime's order: the average,
    then the base values), 0 for a target no tree voted for (onnxruntime's: base values, and
    MIN and MAX's extremes, only where a tree voted; onnx.reference gives them), post-
    transformed, as ``dtype``. One compiled pass where there is no post transform
    (``per_target``: the base value of each target), else numpy's (``base`` as the model gives
    it): a one-row run's four numpy calls were a fifth of a 100-tree regressor's run."""
    finish = _compiled("regression") if per_target is not None and np.dtype(dtype).char in _LOOP_FLOATS else None
    if finish is not None:
        out = np.empty(scores.shape, dtype)
        finish(scores, voted, divisor, per_target, out)
        return out
    if divisor != 1.0:
        scores /= divisor
    if base is not None and base.size:
        scores += base
    if not voted.all():
        scores[~voted] = 0.0
    return post(scores).astype(dtype)


@kernel("TreeEnsemble", since=5, domain=ML)
def _tree_ensemble(node, request):
    forest, n_targets = _from_v5(node)
    aggregate = int(node.attributes.get("aggregate_function", 1))
    if aggregate not in (0, 1, 2, 3):
        raise ValueError(f"TreeEnsemble {node.name!r}: aggregate_function {aggregate} not in 0..3 "
                         "(AVERAGE, SUM, MIN, MAX)")
    post = _post_transform(int(node.attributes.get("post_transform", 0)), node)
    kind = (SUM, SUM, MIN, MAX)[aggregate]

    divisor = float(forest.n_trees) if aggregate == 0 else 1.0
    # the compiled finish's base values (TreeEnsemble has none); None: the post transform's numpy finish
    per_target = np.zeros(n_targets) if int(node.attributes.get("post_transform", 0)) == 0 else None

    def predict(x):
        x = np.asarray(x)
        if kind == SUM and per_target is not None:
            y = forest.summed_regression(x, divisor, per_target, _out_dtype(x))
            if y is not None:
                return y
        scores, voted = forest.aggregate(x, kind, n_targets)
        return _finish_regression(scores, voted, divisor, per_target, post, _out_dtype(x))

    return predict


@kernel("TreeEnsembleRegressor", domain=ML)
def _tree_ensemble_regressor(node, request):
    legacy = _LegacyForest(node, "target")
    a = node.attributes
    n_targets = int(a.get("n_targets", int(legacy.vote_ids.max(initial=0)) + 1))
    if n_targets == 1:
        legacy.keep_first_votes()
    forest = _from_legacy(legacy)
    base = legacy.arr("base_values", np.float64, np.zeros(0))
    aggregate = a.get("aggregate_function", "SUM")
    if aggregate not in _LEGACY_AGGREGATES:
        raise ValueError(f"{legacy.name}: aggregate_function {aggregate!r} not one of {', '.join(_LEGACY_AGGREGATES)}")
    post = _post_transform(a.get("post_transform", "NONE"), node)
    kind = {"SUM": SUM, "AVERAGE": SUM, "MIN": MIN, "MAX": MAX}[aggregate]

    divisor = float(forest.n_trees) if aggregate == "AVERAGE" else 1.0
    # the compiled finish's base value of each target (one value is every target's, as numpy
    # broadcasts it); None: the numpy finish, for a post transform, or a base of another size
    # (numpy's error names it)
    per_target = None
    if a.get("post_transform", "NONE") == "NONE" and base.size in (0, 1, n_targets):
        per_target = np.broadcast_to(base, (n_targets,)).astype(np.float64) if base.size else np.zeros(n_targets)

    def predict(x):
        x = np.asarray(x)
        if kind == SUM and per_target is not None:
            y = forest.summed_regression(x, divisor, per_target, np.float32)
            if y is not None:
                return y
        scores, voted = forest.aggregate(x, kind, n_targets)
        return _finish_regression(scores, voted, divisor, per_target, post, np.float32, base)

    return predict


def _logistic(s: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-s))


DELEGATED.add((ML, "TreeEnsembleClassifier"))  # two two-class configurations, see below


@kernel("TreeEnsembleClassifier", domain=ML)
def _tree_ensemble_classifier(node, request):
    strings = node.attr("classlabels_strings")
    labels = np.array(strings, dtype=object) if strings else np.asarray(node.attr("classlabels_int64s") or [], dtype=np.int64)
    n_classes = len(labels)
    legacy = _LegacyForest(node, "class")
    if n_classes < 2:
        raise ValueError(f"{legacy.name}: needs at least two class labels, has {n_classes}")
    forest = _from_legacy(legacy)
    a = node.attributes
    base = legacy.arr("base_values", np.float64, np.zeros(0))
    post_name = a.get("post_transform", "NONE")
    post = _post_transform(post_name, node)
    if n_classes > 2:
        base_scores = np.ascontiguousarray(base, np.float64)
        plain_labels = labels.dtype == np.int64 and labels.tolist() == list(range(n_classes))
        compiled_finish = post_name in ("NONE", 0) and base.size <= n_classes

        def classify(x):
            finish = _compiled("many_class") if compiled_finish else None
            x = np.asarray(x)
            found = forest.summed_classification(x, n_classes, (base_scores,)) if finish is not None else None
            if found is not None:
                wins, out = found
                return [wins if plain_labels else labels[wins], out]
            scores, voted = forest.aggregate(x, SUM, n_classes)
            if finish is not None:  # the lines below in one compiled loop (a third of a one-row run)
                out = np.empty(scores.shape, np.float32)
                wins = np.empty(scores.shape[0], np.int64)
                finish(scores, voted, base_scores, out, wins)
                return [wins if plain_labels else labels[wins], out]
            if base.size:
                k = base.size
                scores[:, :k] += base
                voted[:, :k] = True
            # the best voted class (classes nobody voted for and without a base value do not win)
            best = np.argmax(np.where(voted, scores, -np.inf), axis=1)
            return [labels[best], post(scores).astype(np.float32)]

        return Kernel(run=classify)

    # two classes: onnxruntime's conventions. "Binary" is an encoding whose leaves vote for one
    # class only; its weights decide the label (> 0.5 when all are positive: probabilities;
    # else > 0: margins) and the other column is derived from the voted one.
    binary = len(set(legacy.vote_ids.tolist())) == 1
    positive = bool(np.all(legacy.vote_weights >= 0))
    post_name = _post_name(post_name)
    if post_name == "PROBIT" or (base.size == 1 and not binary) or base.size > 2:
        # onnxruntime writes one column for some rows here; not a convention worth copying
        return reference_kernel(node, request)

    threshold = 0.5 if binary and positive else 0.0
    post_code = {"NONE": POST_NONE, "SOFTMAX": POST_SOFTMAX, "LOGISTIC": POST_LOGISTIC,
                 "SOFTMAX_ZERO": POST_SOFTMAX_ZERO}[post_name]
    base0 = float(base[0]) if base.size else 0.0
    base1 = float(base[1]) if base.size == 2 else 0.0
    plain_labels = labels.dtype == np.int64 and labels.tolist() == [0, 1]  # the label is the index

    rules = (base.size, base0, base1, threshold, binary and positive, post_code)

    def classify(x):
        finish = _compiled("two_class")
        if finish is None:
            return _two_class_numpy(x)
        x = np.asarray(x)
        found = forest.summed_classification(x, 2, rules)
        if found is not None:
            wins, out = found
            return [wins if plain_labels else labels[wins], out]
        scores, voted = forest.aggregate(x, SUM, 2)
        n = scores.shape[0]
        out = np.empty((n, 2), np.float32)
        wins = np.empty(n, np.int64)
        # the rules below (_two_class_numpy) in one compiled loop: about twenty numpy calls
        # were most of a one-row run (exp is LLVM's there, numpy's SIMD one here: float64
        # values may differ in the last bit, the float32 outputs did not in 2M samples)
        finish(scores, voted, *rules, out, wins)
        return [wins if plain_labels else labels[wins], out]

    def _two_class_numpy(x):
        scores, voted = forest.aggregate(np.asarray(x), SUM, 2)
        s0, s1, has0, has1 = scores[:, 0], scores[:, 1], voted[:, 0], voted[:, 1]
        if base.size == 2:
            # with a class-1 vote, onnxruntime derives both columns from class 0's sum and the
            # second base value; without one, it adds each base value to its class
            s1, s0 = np.where(has1, base[1] + s0, s1 + base[1]), np.where(has1, -(base[1] + s0), s0 + base[0])
            two = np.ones(len(s0), dtype=bool)
        else:
            if base.size == 1:
                s0 = s0 + base[0]
            two = has1  # other rows have one score, from which the second column is derived
        weight = np.where(two & has1, s1, np.where(has0, s0, 0.0))
        wins = weight > (0.5 if binary and positive else 0.0)
        out = np.empty((len(s0), 2))
        # rows with two scores: a class no tree voted for scores 0 (base values included)
        out[:, 0] = s0 if has0.all() else np.where(has0, s0, 0.0)
        out[:, 1] = s1 if has1.all() else np.where(has1, s1, 0.0)
        if not two.all():
            # rows with one score (class 0's): the second column is derived from it
            sc = s0 if not two.any() else s0[~two]
            if post_name == "LOGISTIC":
                first, second = _logistic(-sc), _logistic(sc)
            else:  # probabilities: the other class is 1 - p; margins: -m
                first, second = (1.0 - sc if binary and positive else -sc), sc
        out = post(out) if two.any() else out
        if not two.all():
            if two.any():
                out[~two, 0], out[~two, 1] = first, second
            else:
                out[:, 0], out[:, 1] = first, second
        return [labels[wins.astype(np.int64)], out.astype(np.float32)]

    return Kernel(run=classify)
