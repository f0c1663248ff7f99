"""String ops: StringNormalizer, StringConcat, StringSplit, RegexFullMatch, TfIdfVectorizer, and
onnxruntime's Tokenizer and MurmurHash3 (com.microsoft).

Strings are numpy object arrays of Python ``str`` (as onnxruntime's Python API gives them).
"""

from __future__ import annotations

import functools
import re
import unicodedata

import numpy as np

from ort_core import Kernel

from ..registry import kernel

_CASE_ACTIONS = ("LOWER", "UPPER", "NONE")


def _strings(x) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind not in ("O", "U", "S"):
        raise TypeError(f"expected a string tensor, got {x.dtype}")
    # bytes, also as objects in an object array, are read as UTF-8 (onnxruntime reads an
    # object array's bytes as str(b"..."), "b'...'", which no model means)
    if x.dtype.kind == "S" or x.dtype.kind == "O" and any(isinstance(v, bytes) for v in x.flat):
        return np.vectorize(lambda v: v.decode("utf-8") if isinstance(v, bytes) else v, otypes=[object])(x)
    return x.astype(object)


@functools.lru_cache(maxsize=4096)
def _simple_case(c: str, upper: bool) -> str:
    """One character's simple (one-to-one) case mapping, as onnxruntime's towupper/towlower
    give it: Python's full mapping makes two characters of some ("ß" -> "SS", "ﬁ" -> "FI",
    "İ" -> "i̇"); where the rest are combining marks the first is the simple mapping, else
    the character stays."""
    mapped = c.upper() if upper else c.lower()
    if len(mapped) == 1:
        return mapped
    return mapped[0] if all(unicodedata.combining(m) for m in mapped[1:]) else c


def _change_case(word: str, upper: bool) -> str:
    """``word`` in upper or lower case, character by character (no final-sigma context)."""
    if word.isascii():
        return word.upper() if upper else word.lower()
    return "".join(_simple_case(c, upper) for c in word)


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
    stops = set(stopwords) if case_sensitive else {_change_case(w, False) for w in stopwords}
    change = {"LOWER": lambda w: _change_case(w, False), "UPPER": lambda w: _change_case(w, True), "NONE": None}[action]

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
            words = [w for w in words if (w if case_sensitive else _change_case(w, False)) not in stops]
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


# ------------------------------------------------------------------------------ Tokenizer (com.microsoft)

_MS = "com.microsoft"
#: the start and end markers ``mark=1`` puts around each string's tokens (onnxruntime's)
_START_MARK, _END_MARK = "\x02", "\x03"


def _check_tokenizer(node) -> str | None:
    missing = [name for name in ("mark", "pad_value", "mincharnum") if node.attr(name) is None]
    if missing:
        return f"Tokenizer: attribute(s) {', '.join(missing)} required"
    if int(node.attr("mincharnum")) < 1:
        return f"Tokenizer: mincharnum must be positive, got {node.attr('mincharnum')}"
    separators, expression = node.attr("separators"), node.attr("tokenexp")
    if separators is None and not expression:
        return "Tokenizer: needs the separators or a non-empty tokenexp attribute"
    return None


def _pattern(node, text: str, what: str) -> re.Pattern:
    # RE2 (onnxruntime's engine) reads \w, \d, \s as ASCII classes; Python's re does so with
    # re.ASCII. (RE2 takes the longest of the leftmost matches, Python the first alternative:
    # the two differ only on alternations one of which is a prefix of another.)
    try:
        return re.compile(text, re.ASCII)
    except re.error as exc:
        raise ValueError(f"Tokenizer {node.name!r}: cannot compile {what} {text!r}: {exc}") from None


@kernel("Tokenizer", domain=_MS, check=_check_tokenizer)
def _tokenizer(node, request):
    """onnxruntime's Tokenizer: each string of X ([C] or [N, C]) split into tokens of at least
    ``mincharnum`` characters, by the ``separators`` (regular expressions applied one after the
    other to the pieces the previous ones left) or as the matches of ``tokenexp``; separators
    [""] or tokenexp "." split into characters. Y is X's shape plus the most tokens of a
    string: [start mark] tokens [end mark], then ``pad_value``; Y's last axis is 0 where no
    string has a token."""
    mark = bool(node.attr("mark"))
    pad = node.attr("pad_value")
    pad = pad.decode() if isinstance(pad, bytes) else str(pad)
    shortest = int(node.attr("mincharnum"))
    separators = node.attr("separators")
    separators = None if separators is None else [s.decode() if isinstance(s, bytes) else str(s) for s in separators]
    expression = node.attr("tokenexp")
    expression = expression.decode() if isinstance(expression, bytes) else expression
    by_character = separators == [""] if separators is not None else expression == "."
    if by_character and shortest > 1:
        raise ValueError(f"Tokenizer {node.name!r}: mincharnum {shortest} is too big for character tokenization")
    if separators is not None and not separators:
        raise ValueError(f"Tokenizer {node.name!r}: separators must not be empty")
    splitters = [] if by_character or separators is None else [_pattern(node, s, "separator") for s in separators]
    finder = None if by_character or separators is not None else _pattern(node, expression, "tokenexp")

    def split(text: str, pattern: re.Pattern) -> list[str]:
        pieces, start = [], 0
        while start <= len(text):
            found = pattern.search(text, start)
            if found is None:
                if len(text) - start >= shortest:  # the trailing piece
                    pieces.append(text[start:])
                break
            if found.start() - start >= shortest:
                pieces.append(text[start:found.start()])
            start = found.end() if found.end() > found.start() else found.start() + 1
        return pieces

    def tokens_of(text: str) -> list[str]:
        if by_character:
            return list(text)
        if finder is not None:
            found, start = [], 0
            while len(text) >= shortest and start <= len(text):
                match = finder.search(text, start)
                if match is None:
                    break
                if match.end() - match.start() >= shortest:
                    found.append(match.group())
                    start = match.end()
                else:
                    start = match.start() + 1
            return found
        pieces = [text]
        for pattern in splitters:
            pieces = [token for piece in pieces for token in split(piece, pattern)]
            if not pieces:
                break
        return pieces

    def run(x):
        x = _strings(x)
        if x.ndim not in (1, 2):
            raise ValueError(f"Tokenizer {node.name!r}: X must be [C] or [N, C], got shape {list(x.shape)}")
        if x.size == 0:
            return np.empty(x.shape[:1] + (0,) if x.ndim == 2 else (0,), dtype=object)
        rows = [tokens_of(s) for s in x.reshape(-1)]
        most = max(map(len, rows))
        if most == 0:
            return np.empty(x.shape + (0,), dtype=object)
        width = most + 2 * mark
        y = np.full((len(rows), width), pad, dtype=object)
        for k, row in enumerate(rows):
            filled = [_START_MARK, *row, _END_MARK] if mark else row
            y[k, :len(filled)] = filled
        return y.reshape(x.shape + (width,))

    return run


# ------------------------------------------------------------------------------ MurmurHash3 (com.microsoft)


@kernel("MurmurHash3", domain=_MS)
def _murmur_hash3(node, request):
    """onnxruntime's MurmurHash3: the 32-bit x86 MurmurHash3 of each element (a string's UTF-8
    bytes, a number's little-endian bytes) with ``seed``, as uint32, or as int32 where
    ``positive`` is 0. The output type is the node's declared one (uint32 or int32)."""
    seed = int(node.attr("seed", 0)) & 0xFFFFFFFF
    positive = bool(node.attr("positive", 1))
    declared = request.value(request.outputs[0]).dtype if request.outputs and request.outputs[0] else None

    def run(x):
        x = np.asarray(x)
        if x.dtype.kind in "OUS":
            data = [s.encode("utf-8") if isinstance(s, str) else bytes(s) for s in x.reshape(-1)]
        elif x.dtype in (np.int32, np.uint32, np.int64, np.uint64, np.float32, np.float64):
            data = [v.tobytes() for v in x.astype(x.dtype.newbyteorder("<"), copy=False).reshape(-1)]
        else:
            raise TypeError(f"MurmurHash3 {node.name!r}: input type {x.dtype} not supported "
                            "(int32, uint32, int64, uint64, float, double, string)")
        hashes = np.array([_murmur3_32(b, seed) for b in data], dtype=np.uint32).reshape(x.shape)
        hashes = hashes if positive else hashes.view(np.int32)
        # the bits as the graph declares them (the schema ties the type to nothing)
        return hashes.view(declared) if declared in (np.int32, np.uint32) and declared != hashes.dtype else hashes

    return run


def _murmur3_32(data: bytes, seed: int) -> int:
    """MurmurHash3_x86_32 (Austin Appleby's public-domain algorithm)."""
    c1, c2, mask = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF
    h = seed
    whole = len(data) // 4 * 4
    for k in np.frombuffer(data[:whole], dtype="<u4").tolist():
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        h ^= k
        h = ((h << 13) | (h >> 19)) & mask
        h = (h * 5 + 0xE6546B64) & mask
    tail = data[whole:]
    if tail:
        k = int.from_bytes(tail, "little")
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        h ^= k
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & mask
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & mask
    h ^= h >> 16
    return h
