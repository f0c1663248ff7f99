"""Shape computations as one remembered step.

Exported graphs compute shapes at run time: Shape -> Gather -> Unsqueeze -> Concat -> Reshape,
Shape -> Slice -> Equal -> If. Each such node costs a Python call of about 1 us while onnxruntime
spends a fraction of that, and streaming models run dozens per call on tiny tensors (silero-vad,
BERT encoders with dynamic axes). The values depend only on the shape of the tensor the Shape or
Size node reads (its *root*) and on constants, so for a given root shape they are the same every
run.

``groups`` claims, per root tensor, its Shape/Size nodes and the pure ops computed from their
outputs and constants alone (``SHAPE_OPS``: no value of the root's data, no other tensor, no
control flow). ``kernel`` runs the members' own kernels on the first run of each root shape and
returns the remembered outputs (read-only) on the next runs. Outputs larger than
``MAX_REMEMBERED_ELEMENTS`` (an Expand or ConstantOfShape of a big shape) are computed every run
instead. Nodes of other roots (a Concat of two inputs' shapes) stay single steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ort_core import GraphView, Kernel, KernelRequest, NodeView

from ._util import GroupMembers

#: ops whose outputs are a function of their inputs alone (deterministic, no state) and whose
#: kernels the CPU provider has; the root's Shape/Size plus these form a group
SHAPE_OPS = frozenset({
    "Shape", "Size", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast", "Reshape",
    "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Floor", "Ceil", "Sqrt", "Max", "Min",
    "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Where",
    "Identity", "Range", "Expand", "ConstantOfShape", "ReduceProd", "ReduceSum", "ReduceMax",
    "ReduceMin",
})
_ROOT_OPS = ("Shape", "Size")

#: a remembered output holds at most this many elements (shapes and small index tensors);
#: larger ones are computed each run rather than held for the session's life
MAX_REMEMBERED_ELEMENTS = 4096
#: root shapes remembered per group; a model fed ever new shapes starts over when full
MAX_REMEMBERED_SHAPES = 64

_NOTE = "shape computation, remembered per input shape"


def _is_fixed(graph: GraphView, name: str) -> bool:
    """A value the same every run: an initializer that is not a graph input, or a Constant
    node's output."""
    if not graph.defines(name):
        return False
    value = graph.value(name)
    if value.is_initializer:
        return name not in graph.inputs
    producer = graph.producer.get(name)
    return producer is not None and graph.nodes[producer].op_type == "Constant" and graph.nodes[producer].domain == ""


def groups(graph: GraphView, taken: Sequence[int]) -> list[tuple[int, ...]]:
    """Node groups of ``taken`` (indices): per root tensor, the Shape/Size nodes reading it and
    the ``SHAPE_OPS`` nodes computed from their outputs and fixed values alone; only groups of
    two or more nodes (a lone Shape is cheaper run than remembered)."""
    root_of: dict[str, str] = {}  # value name -> the root tensor it is computed from
    members: dict[str, list[int]] = {}
    for i in sorted(taken):  # node order is topological: producers come first
        node = graph.nodes[i]
        if node.domain != "" or node.op_type not in SHAPE_OPS or node.implicit_inputs:
            continue
        if node.op_type in _ROOT_OPS:
            root = node.inputs[0] if node.inputs else ""
            if not root or (graph.defines(root) and graph.value(root).is_initializer):
                continue
        else:
            names = [n for n in node.inputs if n]
            roots = {root_of[n] for n in names if n in root_of}
            # of one root, and otherwise of fixed values only (no data, no second root)
            if len(roots) != 1 or not all(n in root_of or _is_fixed(graph, n) for n in names):
                continue
            root = roots.pop()
        members.setdefault(root, []).append(i)
        for name in node.outputs:
            if name:
                root_of[name] = root
    return [tuple(m) for m in members.values() if len(m) >= 2]


def is_shape_group(nodes: Sequence[NodeView]) -> bool:
    """Whether a fused request's nodes are a group ``groups`` formed."""
    return (len(nodes) >= 2 and nodes[0].op_type in _ROOT_OPS
            and all(n.domain == "" and n.op_type in SHAPE_OPS for n in nodes))


def kernel(request: KernelRequest, build_node: Callable[[NodeView, KernelRequest], Kernel]) -> Kernel | None:
    """The kernel of a group that ``groups`` formed, else None (another kind of group).
    ``build_node`` builds a member's own CPU kernel."""
    nodes = request.nodes
    if not is_shape_group(nodes):
        return None
    members = GroupMembers(request, build_node, "shape group")
    inputs, outputs = request.inputs, request.outputs
    roots = {node.inputs[0] for node in nodes if node.op_type in _ROOT_OPS}
    root_positions = tuple(k for k, name in enumerate(inputs) if name in roots)
    single_output = len(outputs) == 1
    remembered: dict[tuple, Any] = {}

    def run(*args: Any) -> Any:
        key = tuple(args[k].shape for k in root_positions)
        result = remembered.get(key)
        if result is None:
            results = members.run(args)
            if all(_small(v) for v in results):
                if len(remembered) >= MAX_REMEMBERED_SHAPES:
                    remembered.clear()
                result = remembered[key] = _read_only(results[0]) if single_output else tuple(map(_read_only, results))
            else:
                return results[0] if single_output else results
        return result

    return Kernel(run=run, single_output=single_output, note=_NOTE)


def _small(value: Any) -> bool:
    return isinstance(value, (np.ndarray, np.generic)) and value.size <= MAX_REMEMBERED_ELEMENTS


def _read_only(value: np.ndarray | np.generic) -> np.ndarray | np.generic:
    """A read-only copy, so that no reader can change what the next runs are handed (the
    array itself may be an initializer's, which stays as it is); one that owns its memory, so
    that no writeable view of it exists (what ``per_shape`` relies on to keep its result)."""
    if isinstance(value, np.generic):
        return value
    copy = value.copy()
    copy.flags.writeable = False
    return copy
