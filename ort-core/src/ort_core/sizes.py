"""How big a node's output will be, from its input *values*, before it is computed.

One estimator for two bounds: constant folding (``session.max_fold_bytes``, which leaves a node
alone whose output would be too big: ``optimizer/basic.py``) and the CPU provider's memory limit
(its ``max_mem`` option, which refuses a node whose output would not fit before the output is
allocated). Both ask it *before* evaluating the node: materialising a [10^9] ConstantOfShape
to find it too big took 72 s and 11 GB.

Only numpy is imported here (``import ort_core`` stays cheap).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

#: ops whose output can be far bigger than their inputs (its size is decided by input values
#: or attributes, not by the input shapes' broadcast)
GROWING = frozenset({
    "ConstantOfShape", "Expand", "Range", "Tile", "Pad", "Resize", "Upsample", "OneHot", "MatMul",
    "Gemm", "Einsum", "ConvTranspose", "Col2Im", "CenterCropPad", "EyeLike", "Conv",
})

_NO_ATTRIBUTES: Callable[[str], Any] = lambda name: None  # noqa: E731

_ERRORS = (ValueError, TypeError, IndexError, OverflowError, ZeroDivisionError, AttributeError)


def _product(dims: Sequence[Any]) -> int:
    n = 1
    for d in dims:
        n *= max(0, int(d))
    return n


def _broadcast(*shapes: Sequence[int]) -> list[int]:
    """numpy's broadcast of ``shapes`` in Python integers (``np.broadcast_shapes`` refuses a
    result of more than 2^63 elements, which is what a bomb asks for)."""
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for shape in shapes:
        for k, d in enumerate(shape, rank - len(shape)):
            d = int(d)
            if d != 1:
                if out[k] not in (1, d):
                    raise ValueError(f"shapes {shapes} do not broadcast")
                out[k] = d
    return out


def _ints(x: Any) -> list[int]:
    return [int(d) for d in np.asarray(x).reshape(-1)]


def output_elements(op_type: str, inputs: Sequence[np.ndarray | None],
                    attribute: Callable[[str], Any] | None = None) -> int | None:
    """Elements of the node's (first) output computed from its input values, for the ops that
    grow; for the others, the broadcast of the inputs' shapes (elementwise ops, and a bound for
    the shape ops); None where neither applies. ``attribute(name)`` gives an attribute's value
    (None when absent); it is asked only for the forms that keep sizes in attributes (Pad and
    Upsample of old opsets, Resize's ``axes`` and ``keep_aspect_ratio_policy``). Python
    integers: a product past 2^63 is still right."""
    attribute = attribute or _NO_ATTRIBUTES
    op = op_type
    try:
        if op == "ConstantOfShape":
            return _product(_ints(inputs[0]))
        if op == "Expand":
            return _product(_broadcast(inputs[0].shape, _ints(inputs[1])))
        if op == "Tile":
            return _product([d * r for d, r in zip(inputs[0].shape, _ints(inputs[1]))])
        if op == "Range":
            start, limit, delta = (float(np.asarray(x).reshape(())) for x in inputs[:3])
            return max(0, int(np.ceil((limit - start) / delta)))
        if op == "OneHot":
            return int(np.asarray(inputs[0]).size) * max(0, int(np.asarray(inputs[1]).reshape(-1)[0]))
        if op == "Pad":
            return _pad(inputs, attribute)
        if op in ("Resize", "Upsample"):
            return _resize(op, inputs, attribute)
        if op in GROWING:
            return None
        shapes = [x.shape for x in inputs if x is not None]
        return _product(_broadcast(*shapes)) if shapes else None
    except _ERRORS:
        return None


def _pad(inputs: Sequence[np.ndarray | None], attribute: Callable[[str], Any]) -> int | None:
    shape = list(inputs[0].shape)
    rank = len(shape)
    if len(inputs) > 1 and inputs[1] is not None:  # opset 11+: pads (and from 18 axes) are inputs
        pads = _ints(inputs[1])
        axes = _ints(inputs[3]) if len(inputs) > 3 and inputs[3] is not None else list(range(rank))
    else:
        pads = _ints(attribute("pads") or [])
        axes = list(range(rank))
    if len(pads) != 2 * len(axes):
        return None
    for k, axis in enumerate(axes):
        axis = axis + rank if axis < 0 else axis
        shape[axis] = shape[axis] + pads[k] + pads[k + len(axes)]
    return _product(shape)


def _resize(op: str, inputs: Sequence[np.ndarray | None], attribute: Callable[[str], Any]) -> int | None:
    shape = list(inputs[0].shape)
    rank = len(shape)
    if op == "Upsample" or len(inputs) == 2:  # Upsample, and Resize-10: (X, scales)
        scales = inputs[1] if len(inputs) > 1 and inputs[1] is not None else attribute("scales")
        sizes = None
    else:  # Resize-11+: (X, roi, scales, sizes)
        scales = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
        sizes = inputs[3] if len(inputs) > 3 and inputs[3] is not None else None
    axes = attribute("axes")
    axes = [a + rank if a < 0 else a for a in _ints(axes)] if axes is not None else list(range(rank))
    if sizes is not None and np.asarray(sizes).size:
        wanted = _ints(sizes)
        if len(wanted) != len(axes):
            return None
        policy = attribute("keep_aspect_ratio_policy") or "stretch"
        policy = policy.decode() if isinstance(policy, bytes) else str(policy)
        if policy != "stretch":
            ratios = [w / shape[a] for w, a in zip(wanted, axes) if shape[a]]
            scale = (max if policy == "not_smaller" else min)(ratios) if ratios else 1.0
            wanted = [int(np.round(shape[a] * scale)) for a in axes]
        for w, a in zip(wanted, axes):
            shape[a] = w
        return _product(shape)
    if scales is None:
        return None
    factors = [float(s) for s in np.asarray(scales, dtype=np.float64).reshape(-1)]
    if not factors:
        return None
    if len(factors) != len(axes):
        return None
    for s, a in zip(factors, axes):
        shape[a] = int(np.floor(shape[a] * s))
    return _product(shape)
