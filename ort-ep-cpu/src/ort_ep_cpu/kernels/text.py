"""String ops: StringNormalizer, StringConcat, StringSplit, RegexFullMatch, TfIdfVectorizer.

Strings are numpy object arrays of Python ``str`` (as onnxruntime's Python API gives them).
"""

from __future__ import annotations

import re

import numpy as np

from ort_core import Kernel

from ..registry import kernel

_CASE_ACTIONS = ("LOWER", "UPPER", "NONE")


def _strings(x) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind not in ("O", "U", "S"):
        raise TypeError(f"expected a string tensor, got {x.dtype}")
    if x.dtype.kind == "S":
        return np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(x)
    return x.astype(object)


def _check_normalizer(node) -> str | None:
    action = node.attr("case_change_action", "NONE")
    if action not in _CASE_ACTIONS:
        return f"StringNormalizer: case_change_action {action!r} is not one of {', '.join(_CASE_ACTIONS)}"
    return None


@kernel("StringNormalizer", since=10, check=_check_normalizer)
def _string_normalizer(node, request):
    action = node.attr("case_change_action", "NONE")
    case_sensitive = bool(node.attr("is_case_sensitive", 0))
    stopwords = list(node.attr("stopwords") or [])
    # case-insensitive stop words compare in lower case (onnxruntime's behaviour)
    stops = set(stopwords) if case_sensitive else {w.lower() for w in stopwords}
    change = {"LOWER": str.lower, "UPPER": str.upper, "NONE": None}[action]

    def normalize(x):
        x = _strings(x)
        if x.ndim == 2 and x.shape[0] != 1:
            raise ValueError(
                f"StringNormalizer {node.name!r}: a 2-D input must have shape [1, C], got {list(x.shape)}"
            )
        if x.ndim not in (1, 2):
            raise ValueError(f"StringNormalizer {node.name!r}: input must be [C] or [1, C], got rank {x.ndim}")
        words = x.reshape(-1).tolist()
        if stops:
            words = [w for w in words if (w if case_sensitive else w.lower()) not in stops]
        if change is not None:
            words = [change(w) for w in words]
        if not words:  # everything filtered: one empty string, as the spec says
            words = [""]
        out = np.array(words, dtype=object)
        return out.reshape(1, -1) if x.ndim == 2 else out

    return normalize


@kernel("StringConcat", since=20)
def _string_concat(node, request):
    return lambda x, y: np.asarray(np.add(_strings(x), _strings(y), dtype=object), dtype=object)


@kernel("StringSplit", since=20)
def _string_split(node, request):
    delimiter = node.attr("delimiter") or None  # "" or absent: split on runs of whitespace
    maxsplit = node.attr("maxsplit")
    limit = -1 if maxsplit is None else int(maxsplit)

    def split(x):
        x = _strings(x)
        # an empty string has no substrings (onnxruntime), not one empty one (str.split)
        parts = [s.split(delimiter, limit) if s else [] for s in x.reshape(-1).tolist()]
        counts = np.array([len(p) for p in parts], dtype=np.int64).reshape(x.shape)
        width = int(counts.max(initial=0))
        out = np.full((len(parts), width), "", dtype=object)
        for i, p in enumerate(parts):
            out[i, : len(p)] = p
        return [out.reshape(*x.shape, width), counts]

    return Kernel(run=split)


@kernel("RegexFullMatch", since=20)
def _regex_full_match(node, request):
    pattern = node.attr("pattern")
    if pattern is None:
        raise ValueError(f"RegexFullMatch {node.name!r}: attribute 'pattern' is required")
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"RegexFullMatch {node.name!r}: bad pattern {pattern!r}: {exc}") from None
    match = np.vectorize(lambda s: compiled.fullmatch(s) is not None, otypes=[bool])

    def run(x):
        x = _strings(x)
        return match(x) if x.size else np.zeros(x.shape, dtype=bool)

    return run


# ------------------------------------------------------------------------------ TfIdfVectorizer

_TFIDF_MODES = ("TF", "IDF", "TFIDF")


def _check_tfidf(node) -> str | None:
    mode = node.attr("mode")
    if mode not in _TFIDF_MODES:
        return f"TfIdfVectorizer: mode {mode!r} is not one of {', '.join(_TFIDF_MODES)}"
    if not node.attr("pool_int64s") and not node.attr("pool_strings"):
        return "TfIdfVectorizer: needs pool_int64s or pool_strings"
    return None


@kernel("TfIdfVectorizer", since=9, check=_check_tfidf)
def _tfidf_vectorizer(node, request):
    mode = node.attr("mode")
    min_n, max_n = int(node.attr("min_gram_length")), int(node.attr("max_gram_length"))
    max_skip = int(node.attr("max_skip_count", 0))
    counts = [int(c) for c in node.attr("ngram_counts")]
    indexes = np.asarray(node.attr("ngram_indexes"), dtype=np.int64)
    weights = node.attr("weights")
    if weights:
        # weights[j] belongs to the j-th n-gram of the pool, which counts into column indexes[j]
        if len(weights) != len(indexes):
            raise ValueError(
                f"TfIdfVectorizer {node.name!r}: {len(weights)} weights for {len(indexes)} ngram_indexes"
            )
        column_weights = np.zeros(int(indexes.max()) + 1, dtype=np.float32)
        column_weights[indexes] = np.asarray(weights, dtype=np.float32)
        weights = column_weights
    else:
        weights = None
    strings = bool(node.attr("pool_strings"))
    pool = list(node.attr("pool_strings") if strings else [int(v) for v in node.attr("pool_int64s")])
    n_out = int(indexes.max()) + 1

    # Tokens become ids in the pool's vocabulary (unknown: -1); an n-gram of ids becomes one
    # integer key (base vocabulary size + 1), so matching is a sorted search over all windows.
    vocab = sorted(set(pool))
    token_id = {t: k for k, t in enumerate(vocab)}
    base = len(vocab) + 1
    if base ** max_n >= 2**62:
        raise ValueError(f"TfIdfVectorizer {node.name!r}: vocabulary {len(vocab)} too large for {max_n}-grams")
    keys: dict[int, list[tuple[int, int]]] = {}  # n -> [(key, output index)]
    position = 0
    for k, start in enumerate(counts):
        n = k + 1
        end = counts[k + 1] if k + 1 < len(counts) else len(pool)
        for j in range(start, end, n):
            if min_n <= n <= max_n:
                key = 0
                for t in pool[j:j + n]:
                    key = key * base + token_id[t] + 1
                keys.setdefault(n, []).append((key, int(indexes[position])))
            position += 1
    tables = {
        n: (np.array([k for k, _ in pairs], dtype=np.int64), np.array([i for _, i in pairs], dtype=np.int64))
        for n, pairs in keys.items()
    }
    tables = {n: (k[np.argsort(k)], i[np.argsort(k)]) for n, (k, i) in tables.items()}
    vocab_keys = np.array(vocab, dtype=object if strings else np.int64)

    def ids_of(x: np.ndarray) -> np.ndarray:
        if strings:
            flat = [token_id.get(t, -1) for t in _strings(x).reshape(-1).tolist()]
            return np.array(flat, dtype=np.int64).reshape(x.shape)
        pos = np.clip(np.searchsorted(vocab_keys, x), 0, len(vocab_keys) - 1)
        return np.where(vocab_keys[pos] == x, pos, -1)

    def vectorize(x):
        x = np.asarray(x)
        if x.ndim > 2:
            raise ValueError(f"TfIdfVectorizer {node.name!r}: input must be [C] or [N, C], got rank {x.ndim}")
        rows = x.reshape(1, -1) if x.ndim < 2 else x
        ids = ids_of(rows)
        n_rows, width = ids.shape
        freq = np.zeros((n_rows, n_out), dtype=np.float32)
        for n, (table_keys, table_out) in tables.items():
            for skip in range(max_skip + 1 if n > 1 else 1):  # unigrams are counted once
                step = skip + 1
                count = width - (n - 1) * step
                if count <= 0:
                    continue
                key = np.zeros((n_rows, count), dtype=np.int64)
                valid = np.ones((n_rows, count), dtype=bool)
                for k in range(n):
                    part = ids[:, k * step:k * step + count]
                    valid &= part >= 0
                    key = key * base + part + 1
                pos = np.clip(np.searchsorted(table_keys, key), 0, len(table_keys) - 1)
                hit = valid & (table_keys[pos] == key)
                r, _ = np.nonzero(hit)
                np.add.at(freq, (r, table_out[pos[hit]]), 1.0)
        if mode == "IDF":
            freq = (freq > 0).astype(np.float32) * (weights if weights is not None else 1.0)
        elif mode == "TFIDF" and weights is not None:
            freq = freq * weights
        return freq.reshape(-1) if x.ndim < 2 else freq

    return vectorize
