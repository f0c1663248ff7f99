"""String ops: StringNormalizer, StringConcat, StringSplit, RegexFullMatch.

Strings are numpy object arrays of Python ``str`` (as onnxruntime's Python API gives them).
TfIdfVectorizer lives in ``ml.py`` next to the other feature extractors.
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
