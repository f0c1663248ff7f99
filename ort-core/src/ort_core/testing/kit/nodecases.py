"""The ONNX node conformance cases, as the kit uses them.

Cases and the output comparison come from the project's conformance suite
(``ort_core.testing.conformance``: onnx's node test-case generators, compared as onnx's backend
runner compares). The kit runs each case itself because it needs the placement (was the
provider under test given a node of it?) and one rule the suite does not have: outputs of
random ops are compared by shape and dtype only, since no two generators draw the same numbers.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .. import conformance

#: Ops whose outputs are random draws: only their shape and dtype can be checked.
RANDOM_OPS = frozenset(
    {"Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike"}
)

NodeCase = conformance.Case


@functools.lru_cache(maxsize=1)
def load_node_cases() -> tuple[tuple[NodeCase, ...], str]:
    """Every node case that has data, and where they came from (cached: generating takes
    seconds)."""
    cases = tuple(c for c in conformance.load_cases(("node",)) if c.data_sets)
    import onnx

    return cases, f"ort_core.testing.conformance node set (onnx {onnx.__version__} generators)"


def compare(expected: Any, actual: Any, rtol: float, atol: float, where: str, random: bool = False) -> str | None:
    """None when ``actual`` matches ``expected``, else why not. ``random``: shape and dtype only."""
    if random and expected is not None and not isinstance(expected, (list, tuple, dict)):
        e, a = np.asarray(expected), np.asarray(actual)
        if a.shape != e.shape or a.dtype != e.dtype:
            return f"{where}: {a.dtype} {list(a.shape)}, expected {e.dtype} {list(e.shape)} (random op: shape and dtype checked)"
        return None
    try:
        conformance.compare_value(expected, actual, rtol, atol, where)
    except conformance.Mismatch as exc:
        return str(exc)
    return None
