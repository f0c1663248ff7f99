"""Sequences and optionals.

A sequence is a Python list of numpy arrays (what onnxruntime's Python API takes and returns);
kernels never mutate a list they receive. An optional is its value, or None when empty.
"""

from __future__ import annotations

import numpy as np

from ort_core import Kernel

from ..registry import kernel
from ._util import normalize_axis


def _position(pos, length: int, name: str, inclusive: bool) -> int:
    p = int(np.asarray(pos).reshape(-1)[0])
    high = length if inclusive else length - 1
    if p < -length or p > high:
        raise IndexError(f"{name}: position {p} out of range for a sequence of length {length}")
    return p + length if p < 0 else p


@kernel("SequenceEmpty", since=11)
def _sequence_empty(node, request):
    # the dtype attribute only types the (empty) list; nothing to carry at run time
    return lambda: []


@kernel("SequenceConstruct", since=11)
def _sequence_construct(node, request):
    return lambda *xs: list(xs)


@kernel("SequenceAt", since=11)
def _sequence_at(node, request):
    return lambda seq, pos: seq[_position(pos, len(seq), f"SequenceAt {node.name!r}", False)]


@kernel("SequenceInsert", since=11)
def _sequence_insert(node, request):
    def insert(seq, tensor, pos=None):
        result = list(seq)
        if pos is None:
            result.append(tensor)
        else:
            result.insert(_position(pos, len(seq), f"SequenceInsert {node.name!r}", True), tensor)
        return result

    return insert


@kernel("SequenceErase", since=11)
def _sequence_erase(node, request):
    def erase(seq, pos=None):
        result = list(seq)
        if not result:
            raise IndexError(f"SequenceErase {node.name!r}: the sequence is empty")
        del result[-1 if pos is None else _position(pos, len(seq), f"SequenceErase {node.name!r}", False)]
        return result

    return erase


@kernel("SequenceLength", since=11)
def _sequence_length(node, request):
    return lambda seq: np.array(len(seq), dtype=np.int64)


@kernel("SplitToSequence", since=11)
def _split_to_sequence(node, request):
    axis = int(node.attr("axis", 0))
    keepdims = bool(node.attr("keepdims", 1))

    def split(x, sizes=None):
        a = normalize_axis(axis, x.ndim)
        n = x.shape[a]
        if sizes is None:
            parts = np.split(x, n, axis=a) if n else []
            return parts if keepdims else [np.squeeze(p, axis=a) for p in parts]
        sizes = np.asarray(sizes)
        if sizes.ndim == 0:
            step = int(sizes)
            if step <= 0:
                raise ValueError(f"SplitToSequence {node.name!r}: split must be positive, got {step}")
            cuts = list(range(step, n, step))
        else:
            if int(sizes.sum()) != n:
                raise ValueError(
                    f"SplitToSequence {node.name!r}: split sizes {sizes.tolist()} do not sum to {n}"
                )
            cuts = np.cumsum(sizes)[:-1].tolist()
        return np.split(x, cuts, axis=a)

    return split


@kernel("ConcatFromSequence", since=11)
def _concat_from_sequence(node, request):
    axis = int(node.attr("axis"))
    new_axis = bool(node.attr("new_axis", 0))

    def concat(seq):
        if not seq:
            raise ValueError(f"ConcatFromSequence {node.name!r}: the sequence is empty")
        if new_axis:
            return np.stack(seq, axis=normalize_axis(axis, seq[0].ndim + 1))
        return np.concatenate(seq, axis=normalize_axis(axis, seq[0].ndim))

    return concat


@kernel("SequenceMap", since=17)
def _sequence_map(node, request):
    body = request.build_subgraph("body")
    n_decl = len(node.inputs)
    n_out = len(node.outputs)
    is_seq = [request.value(n).type.startswith("seq(") for n in node.inputs]

    def run_map(*args):
        outer = dict(zip(node.implicit_inputs, args[n_decl:]))
        inputs = args[:n_decl]
        seq_flags = [flag or isinstance(x, list) for flag, x in zip(is_seq, inputs)]
        length = len(inputs[0])
        for x, flag in zip(inputs, seq_flags):
            if flag and len(x) != length:
                raise ValueError(f"SequenceMap {node.name!r}: input sequences differ in length")
        results: list[list] = [[] for _ in range(n_out)]
        for i in range(length):
            outputs = body([x[i] if flag else x for x, flag in zip(inputs, seq_flags)], outer)
            for k in range(n_out):
                results[k].append(outputs[k])
        return results

    if n_out == 1:
        return Kernel(run=lambda *args: run_map(*args)[0], single_output=True)
    return Kernel(run=run_map)


# ------------------------------------------------------------------------------- optionals


@kernel("Optional", since=15)
def _optional(node, request):
    return lambda x=None: x


@kernel("OptionalHasElement", since=15)
def _optional_has_element(node, request):
    return lambda x=None: np.array(x is not None)


@kernel("OptionalGetElement", since=15)
def _optional_get_element(node, request):
    def get(x):
        if x is None:
            raise ValueError(f"OptionalGetElement {node.name!r}: the optional input is empty")
        return x

    return get
