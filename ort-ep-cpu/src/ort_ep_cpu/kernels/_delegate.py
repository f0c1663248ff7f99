"""The stop-gap for rarely used ops: run the node with ``onnx.reference.ReferenceEvaluator``.

Every op delegated this way is listed in ``DELEGATED`` (the test suite keeps the list short) and
its kernel carries the placement note ``NOTE``. No other module may delegate.
"""

from __future__ import annotations

import numpy as np

from ort_core import Kernel

from ..registry import kernel

NOTE = "delegated to onnx.reference"

#: (domain, op type) of every op whose CPU kernel is onnx.reference
DELEGATED: set[tuple[str, str]] = set()


def _to_runtime(value):
    """onnx.reference returns numpy unicode arrays for strings; ours are object arrays."""
    if isinstance(value, np.ndarray) and value.dtype.kind == "U":
        return value.astype(object)
    if isinstance(value, list):
        return [_to_runtime(v) for v in value]
    return value


def delegate(op_type: str, since: int = 1, domain: str = "") -> None:
    """Register ``op_type`` as run by onnx.reference (one evaluator per node, built once)."""
    DELEGATED.add((domain, op_type))
    kernel(op_type, since=since, domain=domain)(reference_kernel)


def reference_kernel(node, request) -> Kernel:
    """A kernel running ``node`` with onnx.reference. A native kernel may return it for
    configurations it does not cover; its op must then be listed in ``DELEGATED`` too."""
    if (node.domain, node.op_type) not in DELEGATED:
        raise ValueError(f"{node.qualified_op} is not listed as (partly) delegated to onnx.reference")
    return _build(node, request)


def _build(node, request) -> Kernel:
    from onnx.reference import ReferenceEvaluator  # imported only where an op needs it

    evaluator = ReferenceEvaluator(request.to_model())
    names = list(request.inputs)
    # the evaluator may compute in another precision (float64 from Python floats): give
    # tensors the dtype the graph declares for them
    declared = [request.value(n).dtype if n else None for n in request.outputs]

    # asked for by name: the request's model has as outputs only those something reads (a
    # two-class LinearClassifier whose label no node reads gave one value for two outputs)
    wanted = [n for n in request.outputs if n]

    def run(*args):
        feeds = {n: v for n, v in zip(names, args) if n}
        got = dict(zip(wanted, evaluator.run(wanted, feeds)))
        outputs = [_to_runtime(got[n]) if n else None for n in request.outputs]
        return [
            v.astype(d) if d is not None and isinstance(v, np.ndarray) and v.dtype != d else v
            for v, d in zip(outputs, declared)
        ]

    if len(request.outputs) == 1:
        return Kernel(run=lambda *args: run(*args)[0], single_output=True, note=NOTE)
    return Kernel(run=run, note=NOTE)
