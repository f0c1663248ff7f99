"""Helpers shared by kernel builders."""

from __future__ import annotations

import numpy as np

from ort_core import KernelRequest, NodeView


def const_input(node: NodeView, request: KernelRequest, k: int) -> np.ndarray | None:
    """The value of input ``k`` if it is an initializer (known at session creation), else None."""
    if k >= len(node.inputs) or not node.inputs[k]:
        return None
    return request.value(node.inputs[k]).const_value


def has_input(node: NodeView, k: int) -> bool:
    return k < len(node.inputs) and bool(node.inputs[k])


def normalize_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis
